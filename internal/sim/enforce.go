package sim

import (
	"math"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/invariant"
	"github.com/fencedlease/fencedlease/internal/record"
)

// newestCommitted is the highest fence committed for a FencedLease name.
func (c *checker) newestCommitted(lease string) int64 {
	g, _ := c.grants.Newest(lease, math.MaxInt64)
	return g.Fence
}

// decided checks a decision of the fencing webhook (invariants 4 and 9):
// once a grant is committed, no write from another pod, and none with an
// older fence, is admitted. A grant counts once it was committed before the
// API server started to handle the request (start): a decision reads the
// grant as the API server holds it, so every such grant is one it could
// have seen. A newer grant committed while the request was being decided
// may be the one it was decided on.
func (c *checker) decided(s *Sim, r *request, start int64, allowed, lagging bool) {
	s.stats.WebhookDecisions++
	if lagging {
		s.stats.LaggingCacheDecisions++
	}
	if !allowed {
		s.stats.WebhookDenials++
		return
	}
	newest, ok := c.grants.Newest(r.lease, start)
	if !ok {
		return
	}
	// A delete presents no fence of its own to the object: the pod's newest
	// grant is its authority.
	fence := r.fence
	if last, ok := c.grants.Last(r.lease, string(r.uid)); ok && r.op == admissionv1.Delete {
		fence = last.Fence
	}
	if _, stale := c.grants.Stale(r.lease, fence, start); !stale && c.grants.GrantedTo(r.lease, fence, string(r.uid)) {
		return
	}
	c.fail(s, "the webhook admitted %s after the grant with fence %d to pod UID %s was committed (revision %d, the request started at %d)",
		r, newest.Fence, newest.Holder, newest.At, start)
}

// applied checks a protected write as the API server applied it, on the
// version cur of the object that the webhook decided on (invariant 3): an
// update never carries a lower fence than the stored one, and a delete never
// removes what the holder of a newer grant than the deleter's wrote.
func (c *checker) applied(s *Sim, r *request, cur, obj *corev1.ConfigMap) {
	stored := storedFence(cur, r.lease)
	if r.status && cur != nil && obj != nil {
		// No subresource write unprotects an object or moves its stored
		// fence, whoever sends it.
		if obj.Labels[fencingv1alpha1.LabelProtectedBy] != cur.Labels[fencingv1alpha1.LabelProtectedBy] ||
			obj.Annotations[fencingv1alpha1.AnnotationFence] != cur.Annotations[fencingv1alpha1.AnnotationFence] {
			c.fail(s, "%s was applied and changed the protected object's label or stored fence", r)
		}
	}
	switch r.op {
	case admissionv1.Update:
		// The version decided on counts as accepted, whoever wrote it.
		key := string(cur.UID)
		c.writes.Record(key, invariant.Write[*request]{Fence: stored})
		if h, stale := c.writes.Check(key, invariant.Write[*request]{Fence: r.fence, Of: r}); stale {
			c.fail(s, "%s was applied on a version written with fence %d, after one written with fence %d: a lower fence after a higher one",
				r, stored, h.Fence)
		}
		c.writes.Record(key, invariant.Write[*request]{Fence: storedFence(obj, r.lease), Of: r})
	case admissionv1.Create:
		c.writes.Record(string(obj.UID), invariant.Write[*request]{Fence: storedFence(obj, r.lease), Of: r})
	case admissionv1.Delete:
		if holder, ok := c.grants.Holder(r.lease, stored); r.believed > 0 && stored > r.believed && (!ok || holder != string(r.uid)) {
			c.fail(s, "%s deleted what the holder of the newer grant with fence %d wrote", r, stored)
		}
	}
}

// storedFence is the fence a protected object was last written with, if it
// is protected by that FencedLease.
func storedFence(cm *corev1.ConfigMap, lease string) int64 {
	if cm == nil || cm.Labels[fencingv1alpha1.LabelProtectedBy] != lease {
		return 0
	}
	return record.FenceOf(cm.Annotations[fencingv1alpha1.AnnotationFence])
}
