package sim

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/invariant"
	"github.com/fencedlease/fencedlease/internal/record"
)

// checker verifies the invariants of docs/design.md after every write:
//
//   - 1: at most one pod of a FencedLease is published as holder (role holder
//     with a fence) at any instant;
//   - 2: a fence published to a pod was committed on the Lease before, and is
//     greater than every fence published before for that FencedLease name
//     (across Lease and FencedLease re-creation); a pod that lost a fence
//     never gets it back (authority is never re-acquired for a grant);
//   - 7: a FencedLease's status never moves back: fence and transitions never
//     decrease, and a grant the status recorded as ended never comes back;
//     and the status names only committed grants;
//   - Safe takeover: with takeover Safe, no grant to a pod is written while
//     another pod's grant that reached it or the status may still be valid
//     (less than a lease duration after its last renewal), unless its holder
//     released it;
//   - 8: with holder renewal and takeover Safe, no grant to a pod is written
//     while another pod's process still believes, by its own clock, that it
//     holds the lease.
//
// The rules it shares with the other checkers are internal/invariant's,
// fed each write: 1 and 2 but for the commit (Publications), 7 but for the
// commit (Statuses), the grants' own order (Grants.Commit), and, in
// enforce.go, the webhook's decisions (Grants.Stale, Grants.GrantedTo) and
// the protected objects' stored fences (Order). The rest is the
// simulation's own.
type checker struct {
	// publications, statuses and grants check the rules the simulation
	// shares with the other checkers (internal/invariant); writes checks
	// the order of the fences protected objects store.
	publications *invariant.Publications
	statuses     *invariant.Statuses
	grants       *invariant.Grants
	writes       *invariant.Order[*request]
	// validUntil is, per FencedLease and fence, when a grant stops being
	// valid: a lease duration after its last renewal.
	validUntil map[string]map[int64]time.Time
	// exposed are the grants that reached a pod or the status, the only ones
	// a holder can have acted on.
	exposed map[string]map[int64]bool
	// holderOf is the pod of each committed grant.
	holderOf map[string]map[int64]types.UID
	// immediate is set once the FencedLease's takeover was ever Immediate:
	// from then on an operator may act on that spec (its cache may lag behind
	// for any time in a simulation), so the Safe wait is no longer checked.
	immediate map[string]bool
	// terminated are the pods the kubelet reported with every container
	// terminated. A terminal phase is final, so nothing of such a pod ever
	// runs again: a renewal of its grant written later (by a replica whose
	// cache has not seen the termination yet) revives no one.
	terminated map[types.UID]bool
	violations []string
}

func newChecker() *checker {
	return &checker{
		publications: invariant.NewPublications(),
		statuses:     invariant.NewStatuses(),
		grants:       invariant.NewGrants(),
		writes:       invariant.NewOrder[*request](),
		validUntil:   map[string]map[int64]time.Time{},
		exposed:      map[string]map[int64]bool{},
		holderOf:     map[string]map[int64]types.UID{},
		immediate:    map[string]bool{},
		terminated:   map[types.UID]bool{},
	}
}

func (c *checker) fail(s *Sim, format string, args ...any) {
	msg := fmt.Sprintf("step %d (t=%s): ", s.step, s.clock.Now().Format("15:04:05.000")) + fmt.Sprintf(format, args...)
	c.violations = append(c.violations, msg)
	s.tracef("  VIOLATION: %s", msg)
}

// report fails with each violation of a shared rule, and who wrote.
func (c *checker) report(s *Sim, writer string, vs []invariant.Violation) {
	for _, v := range vs {
		c.fail(s, "%s (after a write by %s)", v.Detail, writer)
	}
}

// afterWrite checks the change a write made to one object.
func (c *checker) afterWrite(s *Sim, k objKey, writer string) {
	h := s.store.hist[k]
	if len(h) == 0 {
		return
	}
	cur := h[len(h)-1].obj
	var prev = func() any {
		if len(h) < 2 {
			return nil
		}
		return h[len(h)-2].obj
	}()
	if s.shards != nil {
		s.shards.check.afterWrite(s, k, cur, prev, writer)
		return
	}
	switch k.kind {
	case "Pod":
		pod, _ := cur.(*corev1.Pod)
		old, _ := prev.(*corev1.Pod)
		c.checkPod(s, k, pod, old, writer)
	case "Lease":
		l, _ := cur.(*coordinationv1.Lease)
		old, _ := prev.(*coordinationv1.Lease)
		c.checkLease(s, k, l, old, writer)
	case "FencedLease":
		fl, _ := cur.(*fencingv1alpha1.FencedLease)
		old, _ := prev.(*fencingv1alpha1.FencedLease)
		c.checkFencedLease(s, k, fl, old, writer)
	}
}

// published returns the FencedLease a pod is published as holder of, and
// the fence, or "" when it is not a holder.
func published(p *corev1.Pod) (string, int64) {
	if p == nil {
		return "", 0
	}
	return record.Published(p.Annotations)
}

func (c *checker) checkPod(s *Sim, k objKey, pod, old *corev1.Pod, writer string) {
	if writer != "world" && pod != nil && old != nil && old.UID == pod.UID &&
		conditionStatus(old, corev1.ContainersReady) != conditionStatus(pod, corev1.ContainersReady) {
		c.fail(s, "%s changed the kubelet's ContainersReady of pod %s from %q to %q", writer, k.name,
			conditionStatus(old, corev1.ContainersReady), conditionStatus(pod, corev1.ContainersReady))
	}
	if pod != nil && holder.Terminated(pod) {
		// The kubelet reports every container terminated: nothing of the pod
		// runs, as after a release.
		s.procs.of(pod.UID).stop()
		c.terminated[pod.UID] = true
		for name, fences := range c.holderOf {
			for f, uid := range fences {
				if uid == pod.UID {
					delete(c.validUntil[name], f)
				}
			}
		}
	}
	lease, fence := published(pod)
	c.observePublication(s, pod, old, writer)
	if lease == "" {
		return
	}
	if ol, of := published(old); ol == lease && of == fence && old.UID == pod.UID {
		return // unchanged
	}
	s.stats.Publishes++
	if fence > 0 && !c.committed(lease, fence) {
		c.fail(s, "%s published fence %d of FencedLease %s to pod %s, but that fence was never committed on the Lease", writer, fence, lease, k.name)
	}
	c.expose(lease, fence)
}

// observePublication feeds the publication tracker the pod as the write
// left it: gone, replaced by a pod of the same name, or published as what
// its annotations say.
func (c *checker) observePublication(s *Sim, pod, old *corev1.Pod, writer string) {
	if old != nil && (pod == nil || old.UID != pod.UID) {
		c.publications.Gone(string(old.UID))
	}
	if pod == nil {
		return
	}
	lease, fence := published(pod)
	c.report(s, writer, c.publications.Observe(invariant.Publication{Pod: pod.Name, UID: string(pod.UID), Lease: lease, Fence: fence,
		Raw: pod.Annotations[fencingv1alpha1.AnnotationFence]}))
}

// committed says whether the fence was committed on the FencedLease's
// Lease.
func (c *checker) committed(lease string, fence int64) bool {
	_, ok := c.grants.Holder(lease, fence)
	return ok
}

func (c *checker) checkLease(s *Sim, k objKey, l, old *coordinationv1.Lease, writer string) {
	if l == nil {
		return
	}
	if record.IsHeartbeat(l.Labels) {
		c.checkHeartbeat(s, k, l)
		return
	}
	state := l.Annotations[fencingv1alpha1.LeaseAnnotationState]
	if state == fencingv1alpha1.LeaseStateHeld {
		if f := record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence]); f > 0 {
			if c.holderOf[k.name] == nil {
				c.holderOf[k.name] = map[int64]types.UID{}
			}
			c.holderOf[k.name][f] = types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID])
			c.report(s, writer, c.grants.Commit(invariant.Grant{Lease: k.name, Fence: f,
				Holder: string(c.holderOf[k.name][f]), At: s.store.rev}))
		}
	}
	newGrant := old == nil && state == fencingv1alpha1.LeaseStatePending ||
		old != nil && ptr.Deref(l.Spec.LeaseTransitions, 0) > ptr.Deref(old.Spec.LeaseTransitions, 0)
	if _, ok := releasedFence(l); ok && (old == nil || old.Annotations[fencingv1alpha1.LeaseAnnotationState] != fencingv1alpha1.LeaseStateReleased) {
		// The holder's process stopped before it released: none of the pod's
		// grants is in use any more.
		released := types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID])
		for f, uid := range c.holderOf[k.name] {
			if uid == released {
				delete(c.validUntil[k.name], f)
			}
		}
	}
	if newGrant {
		s.stats.Grants++
		to := types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID])
		if !c.immediate[k.name] {
			if others := s.procs.believers(s.clock.Now(), to); len(others) > 0 {
				c.fail(s, "a grant of Lease %s to %s was written at %s while takeover is Safe and other holders still believe they hold the lease: %v",
					k.name, ptr.Deref(l.Spec.HolderIdentity, ""), s.clock.Now().Format("15:04:05.000"), others)
			}
		}
		for fence, until := range c.validUntil[k.name] {
			// A fresh grant to the same pod (its grant expired unrenewed, or the
			// renewal mode changed) leaves no other pod acting.
			if c.exposed[k.name][fence] && !c.immediate[k.name] && s.clock.Now().Before(until) && c.holderOf[k.name][fence] != to {
				c.fail(s, "a grant of Lease %s to %s was written at %s, while takeover is Safe and the grant with fence %d was valid until %s",
					k.name, ptr.Deref(l.Spec.HolderIdentity, ""), s.clock.Now().Format("15:04:05.000"), fence, until.Format("15:04:05.000"))
			}
		}
	}
	// A write of a held grant that changes its renewTime, or commits it, is
	// a renewal: the grant stays valid a lease duration from now.
	if state == fencingv1alpha1.LeaseStateHeld && (old == nil || old.Annotations[fencingv1alpha1.LeaseAnnotationState] != state ||
		renewTime(old) != renewTime(l)) {
		fence := record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence])
		if c.terminated[types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID])] {
			return
		}
		c.renewed(s, k.name, fence, leaseDuration(l))
	}
}

// renewed records a renewal of the grant with that fence: it stays valid
// a lease duration from now.
func (c *checker) renewed(s *Sim, name string, fence int64, d time.Duration) {
	if c.validUntil[name] == nil {
		c.validUntil[name] = map[int64]time.Time{}
	}
	c.validUntil[name][fence] = s.clock.Now().Add(d)
}

// leaseDuration is how long a renewal keeps the grant of a Lease valid: the
// FencedLease's lease duration, which a vouched grant's Lease carries in an
// annotation (its spec covers the refresh interval too).
func leaseDuration(l *coordinationv1.Lease) time.Duration {
	if r := record.ParseLease(l.Annotations); r.Vouched() && r.LeaseDuration > 0 {
		return time.Duration(r.LeaseDuration) * time.Second
	}
	return time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
}

// checkHeartbeat: a renewal of the operator's heartbeat renews every grant
// that is held and vouched for by it, as the store has it at that moment:
// each stays valid a lease duration from now. A grant revoked or replaced
// before the renewal was written is renewed by it no more.
func (c *checker) checkHeartbeat(s *Sim, k objKey, hb *coordinationv1.Lease) {
	s.stats.Heartbeats++
	voucher := k.namespace + "/" + k.name
	for key := range s.store.hist {
		if key.kind != "Lease" {
			continue
		}
		l, _ := s.store.headObj(key).(*coordinationv1.Lease)
		if l == nil {
			continue
		}
		r := record.ParseLease(l.Annotations)
		if !r.Held() || !r.Vouched() || r.VouchedBy != voucher || c.terminated[types.UID(r.HolderUID)] {
			continue
		}
		c.renewed(s, key.name, r.Fence, leaseDuration(l))
	}
}

func (c *checker) checkFencedLease(s *Sim, k objKey, fl, old *fencingv1alpha1.FencedLease, writer string) {
	if fl == nil {
		// A FencedLease deleted, and perhaps created again under the same
		// name: the grants of the old one, and the beliefs of its holders,
		// are not forgotten. Its grant ends as any grant does (revoked, then
		// over once expired or released), so a new one of the same name
		// grants with the same Safe wait.
		return
	}
	if fl.Spec.Takeover == fencingv1alpha1.TakeoverImmediate {
		c.immediate[k.name] = true
	}
	st := invariant.Status{FencedLease: k.name, UID: string(fl.UID), Fence: fl.Status.Fence, Transitions: fl.Status.Transitions}
	if h := fl.Status.Holder; h != nil {
		st.HolderUID, st.HolderName = string(h.PodUID), h.PodName
	}
	c.report(s, writer, c.statuses.Observe(st))
	if st.HolderUID == "" {
		return
	}
	if !c.committed(k.name, st.Fence) {
		c.fail(s, "status of FencedLease %s names holder %s with fence %d, which was never committed", k.name, st.HolderName, st.Fence)
	}
	c.expose(k.name, st.Fence)
}

// releasedFence says whether a Lease write released the grant of fence f.
func releasedFence(l *coordinationv1.Lease) (int64, bool) {
	if l.Annotations[fencingv1alpha1.LeaseAnnotationState] != fencingv1alpha1.LeaseStateReleased {
		return 0, false
	}
	f := record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence])
	return f, f > 0
}

func renewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

func (c *checker) expose(lease string, fence int64) {
	if c.exposed[lease] == nil {
		c.exposed[lease] = map[int64]bool{}
	}
	c.exposed[lease][fence] = true
}

// conditionStatus is the status of a pod condition, "" when it has none.
func conditionStatus[T ~string](p *corev1.Pod, t T) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if string(c.Type) == string(t) {
			return c.Status
		}
	}
	return ""
}
