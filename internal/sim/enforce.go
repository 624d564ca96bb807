package sim

import (
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// grantRecord is a grant committed on a FencedLease's Lease: its fence, its
// holder and the store revision of the commit.
type grantRecord struct {
	fence  int64
	holder types.UID
	rev    int64
}

// committedGrant records a grant the first time the Lease holds it.
func (c *checker) committedGrant(lease string, fence int64, holder types.UID, rev int64) {
	for _, g := range c.grants[lease] {
		if g.fence == fence {
			return
		}
	}
	c.grants[lease] = append(c.grants[lease], grantRecord{fence: fence, holder: holder, rev: rev})
}

// newestCommitted is the highest fence committed for a FencedLease name.
func (c *checker) newestCommitted(lease string) int64 {
	var n int64
	for _, g := range c.grants[lease] {
		n = max(n, g.fence)
	}
	return n
}

// grantHolder is the pod of the grant with that fence, if one was committed.
func (c *checker) grantHolder(lease string, fence int64) (types.UID, bool) {
	for _, g := range c.grants[lease] {
		if g.fence == fence {
			return g.holder, true
		}
	}
	return "", false
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
	var newest *grantRecord
	for i, g := range c.grants[r.lease] {
		if g.rev <= start && (newest == nil || g.fence > newest.fence) {
			newest = &c.grants[r.lease][i]
		}
	}
	if newest == nil {
		return
	}
	for _, g := range c.grants[r.lease] {
		if g.rev <= s.store.rev && g.fence >= newest.fence && g.holder == r.uid && (r.op == admissionv1.Delete || g.fence == r.fence) {
			return
		}
	}
	c.fail(s, "the webhook admitted %s after the grant with fence %d to pod UID %s was committed (revision %d, the request started at %d)",
		r, newest.fence, newest.holder, newest.rev, start)
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
		if r.fence < stored {
			c.fail(s, "%s was applied on a version written with fence %d: a lower fence after a higher one", r, stored)
		}
	case admissionv1.Delete:
		if holder, ok := c.grantHolder(r.lease, stored); r.believed > 0 && stored > r.believed && (!ok || holder != r.uid) {
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
