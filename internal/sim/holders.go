package sim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// holderProc is the process in a pod that renews its own grant (holder
// renewal, DESIGN §3a), as the fence package's Session does: it renews with a
// compare-and-swap of renewTime, believes it holds the lease until the send
// time of its last successful renewal plus the lease duration (the margin is
// 0 here: every process shares the simulation's one clock), and stops at once
// when the Lease no longer names it. A paused process neither renews nor
// notices anything; its belief runs out on its own clock all the same.
type holderProc struct {
	paused bool
	// until is the end of its belief that it holds fence, or zero.
	until time.Time
	fence string
}

// holders are the holder processes of the pods, by UID.
type holders map[types.UID]*holderProc

func (h holders) of(uid types.UID) *holderProc {
	p := h[uid]
	if p == nil {
		p = &holderProc{}
		h[uid] = p
	}
	return p
}

// believers returns the pods whose process believes, now, that it holds the
// lease, other than except.
func (h holders) believers(now time.Time, except types.UID) []string {
	var out []string
	for uid, p := range h {
		if uid != except && now.Before(p.until) {
			out = append(out, fmt.Sprintf("%s (fence %s, until %s)", uid, p.fence, p.until.Format("15:04:05.000")))
		}
	}
	sortStrings(out)
	return out
}

// holderStep lets the process of the pod that the Lease names act: renew
// its grant, release it, or pause or resume.
func (w *world) holderStep() bool {
	l := &coordinationv1.Lease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, l); err != nil {
		return false
	}
	uid := types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID])
	if uid == "" || l.Annotations[fencingv1alpha1.LeaseAnnotationRenewal] != string(fencingv1alpha1.RenewalHolder) {
		return false
	}
	p := w.sim.checker.procs.of(uid)
	if pod := w.podByUID(uid); pod == nil || holder.Terminated(pod) {
		p.until = time.Time{} // nothing of the pod runs any more
		return false
	}
	switch n := w.sim.rng.Intn(20); {
	case n == 0:
		p.paused = !p.paused
		w.sim.tracef("step %d: holder process %s %s", w.sim.step, uid, map[bool]string{true: "pauses", false: "resumes"}[p.paused])
		return true
	case p.paused:
		return false
	case n == 1:
		return w.holderRelease(l, uid, p)
	}
	return w.holderRenew(l, uid, p)
}

// holderRenew renews the grant if the Lease, as the process reads it, holds
// its grant; otherwise the process stops believing at once.
func (w *world) holderRenew(l *coordinationv1.Lease, uid types.UID, p *holderProc) bool {
	if l.Annotations[fencingv1alpha1.LeaseAnnotationState] != fencingv1alpha1.LeaseStateHeld {
		p.until = time.Time{}
		return false
	}
	now := w.now()
	next := l.DeepCopy()
	next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	w.sim.tracef("step %d: holder process %s renews", w.sim.step, uid)
	if err := w.write(next, w.c().Update(context.Background(), next)); err != nil {
		return true // a conflict: the process reads again next time
	}
	if w.sim.chance(w.sim.cfg.LostReplies) {
		w.sim.tracef("  lost reply: the holder does not know that its renewal succeeded")
		return true
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	p.until, p.fence = now.Add(d), l.Annotations[fencingv1alpha1.AnnotationFence]
	return true
}

// holderRelease stops the process's work (its belief ends now) and then
// releases the grant with a compare-and-swap: a grant it holds, or its grant
// that the operator revoked (as fence run does once its command has exited).
func (w *world) holderRelease(l *coordinationv1.Lease, uid types.UID, p *holderProc) bool {
	switch state := l.Annotations[fencingv1alpha1.LeaseAnnotationState]; {
	case state == fencingv1alpha1.LeaseStateRevoked:
	case state != fencingv1alpha1.LeaseStateHeld || !w.now().Before(p.until):
		return false
	}
	p.until = time.Time{}
	next := l.DeepCopy()
	next.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStateReleased
	w.sim.tracef("step %d: holder process %s releases fence %s", w.sim.step, uid, l.Annotations[fencingv1alpha1.AnnotationFence])
	_ = w.write(next, w.c().Update(context.Background(), next))
	return true
}

// releasedFence says whether a Lease write released the grant of fence f.
func releasedFence(l *coordinationv1.Lease) (int64, bool) {
	if l.Annotations[fencingv1alpha1.LeaseAnnotationState] != fencingv1alpha1.LeaseStateReleased {
		return 0, false
	}
	f, err := strconv.ParseInt(l.Annotations[fencingv1alpha1.AnnotationFence], 10, 64)
	return f, err == nil
}

// podByUID returns the pod with that UID as stored now, or nil.
func (w *world) podByUID(uid types.UID) *corev1.Pod {
	var list corev1.PodList
	if err := w.sim.store.list(w.sim.store.rev, &list, client.InNamespace(w.namespace)); err != nil {
		return nil
	}
	for i := range list.Items {
		if list.Items[i].UID == uid {
			return &list.Items[i]
		}
	}
	return nil
}
