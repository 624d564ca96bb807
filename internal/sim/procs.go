package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/policy"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Grace is the grace period of the workloads' supervisor (fence run's
// --grace-period): how long a command may go on working after its holder
// noticed that its grant ended, within its deadline with holder renewal.
const Grace = 3 * time.Second

// proc is the workload process of one pod: fence run and its command. It
// learns what it holds as a real one does, late: with holder renewal from
// its watch of the Lease, with operator renewal from its token files (the
// kubelet's copy of the pod's annotations); both lag behind the API server
// by a distance the simulation chooses (view). While it believes it holds,
// and within the grace period after it noticed the end of its grant, its
// command writes protected objects with its fence, through the fencing
// webhook. A paused process neither renews nor notices anything; its
// requests already sent go on.
type proc struct {
	uid    types.UID
	paused bool
	// view is the store revision its watch and its files have reached.
	view int64
	// margin is how long before the end of its grant on the operator's
	// clock it stops on its own (fence run's --margin).
	margin time.Duration
	// lease is the FencedLease it last believed it held.
	lease string
	// until is, with holder renewal, the end of its belief that it holds
	// fence: the send time of its last successful renewal plus the lease
	// duration, less the margin; zero when it believes nothing of the sort.
	until time.Time
	fence int64
	// heldFiles: with operator renewal, its files say it holds fence.
	heldFiles bool
	// workUntil is how long its command goes on working, with workFence,
	// after its holder noticed the end of the grant: SIGTERM, then SIGKILL
	// a grace period later, and with holder renewal never past its
	// deadline.
	workUntil time.Time
	workFence int64
	// workHolder says that the grant whose command still works was renewed
	// by the process itself.
	workHolder bool
	// busy is set while a request of its command is in flight.
	busy bool
}

// procs are the workload processes, by pod UID.
type procs map[types.UID]*proc

func (ps procs) of(uid types.UID) *proc {
	p := ps[uid]
	if p == nil {
		p = &proc{uid: uid}
		ps[uid] = p
	}
	return p
}

// believers returns the pods whose process may still act, by its own clock,
// on a grant it renews itself: its belief or its command's grace not over,
// other than except. With takeover Safe, nobody else is granted until they
// are over (invariant 8).
func (ps procs) believers(now time.Time, except types.UID) []string {
	var out []string
	for uid, p := range ps {
		if uid == except {
			continue
		}
		if end := p.actsUntil(); now.Before(end) {
			out = append(out, fmt.Sprintf("%s (fence %d, until %s)", uid, max(p.fence, p.workFence), end.Format("15:04:05.000")))
		}
	}
	sort.Strings(out)
	return out
}

// actsUntil is when, by its own clock, the process stops acting on a grant
// it renews itself.
func (p *proc) actsUntil() time.Time {
	if p.workHolder && p.workUntil.After(p.until) {
		return p.workUntil
	}
	return p.until
}

// holds says what the process believes it holds now, and with which fence.
func (p *proc) holds(now time.Time) (string, int64, bool) {
	switch {
	case now.Before(p.until) || p.heldFiles:
		return p.lease, p.fence, true
	case now.Before(p.workUntil):
		return p.lease, p.workFence, true
	}
	return "", 0, false
}

// stop ends the process: nothing of its pod runs any more.
func (p *proc) stop() {
	p.until, p.workUntil, p.heldFiles = time.Time{}, time.Time{}, false
}

// procStep lets the process of a random pod act: pause or resume, learn from
// its watch and files, renew or release its grant, and let its command
// write.
func (w *world) procStep() bool {
	pod := w.pickPod()
	if pod == nil {
		return false
	}
	p := w.sim.procs.of(pod.UID)
	if p.view == 0 {
		// A new process: its watch starts now, its margin is its own.
		p.view, p.margin = w.sim.store.rev, []time.Duration{0, time.Second}[w.sim.rng.Intn(2)]
	}
	if holder.Terminated(pod) || pod.Status.Phase == corev1.PodFailed {
		p.stop()
		return false
	}
	if w.sim.rng.Intn(30) == 0 {
		p.paused = !p.paused
		w.sim.tracef("step %d: process of %s %s", w.sim.step, pod.Name, map[bool]string{true: "pauses", false: "resumes"}[p.paused])
		return true
	}
	if p.paused {
		return false
	}
	acted := w.learn(pod, p)
	if w.sim.rng.Intn(25) == 0 && w.release(pod, p) {
		return true
	}
	return w.work(pod, p) || acted
}

// learn brings the process's belief in line with what its watch of the
// Lease and its token files show it, and renews a grant it renews itself.
func (w *world) learn(pod *corev1.Pod, p *proc) bool {
	now := w.now()
	self := &corev1.Pod{}
	if w.sim.store.get(p.view, client.ObjectKeyFromObject(pod), self) != nil {
		return false
	}
	lease := self.Annotations[fencingv1alpha1.AnnotationLease]
	if lease == "" {
		lease = p.lease
	}
	if lease == "" {
		return false
	}
	l := &coordinationv1.Lease{}
	if w.sim.store.get(p.view, types.NamespacedName{Namespace: w.namespace, Name: lease}, l) != nil {
		l = nil
	}
	if l != nil && l.Annotations[fencingv1alpha1.LeaseAnnotationRenewal] == string(fencingv1alpha1.RenewalHolder) {
		return w.learnFromLease(pod, p, lease, l, now)
	}
	// Operator renewal: the files say what it holds.
	fence := record.FenceOf(self.Annotations[fencingv1alpha1.AnnotationFence])
	holds := self.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder && fence > 0
	switch {
	case holds && (!p.heldFiles || p.fence != fence):
		if p.heldFiles && p.fence != fence {
			p.workUntil, p.workFence = time.Time{}, 0 // a new holdership: the old command was stopped
		}
		p.heldFiles, p.fence, p.lease, p.until = true, fence, lease, time.Time{}
		w.sim.tracef("step %d: process of %s holds fence %d (files)", w.sim.step, pod.Name, fence)
		return true
	case !holds && p.heldFiles:
		p.heldFiles = false
		p.workUntil, p.workFence, p.workHolder = now.Add(Grace), p.fence, false
		w.sim.tracef("step %d: process of %s notices the end of fence %d (files); its command works until %s",
			w.sim.step, pod.Name, p.fence, p.workUntil.Format("15:04:05.000"))
		return true
	}
	return false
}

// learnFromLease is learn with holder renewal: it renews a grant the Lease
// (as its watch shows it) names it in, and stops at once when the Lease no
// longer does, its command within the grace period and its deadline.
func (w *world) learnFromLease(pod *corev1.Pod, p *proc, name string, l *coordinationv1.Lease, now time.Time) bool {
	p.heldFiles = false
	fence := record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence])
	named := types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]) == pod.UID &&
		l.Annotations[fencingv1alpha1.LeaseAnnotationState] == fencingv1alpha1.LeaseStateHeld && fence > 0
	if !named || (now.Before(p.until) && fence != p.fence) {
		if now.Before(p.until) {
			p.workUntil, p.workFence, p.workHolder = minTime(now.Add(Grace), p.until), p.fence, true
			w.sim.tracef("step %d: process of %s sees its grant end (fence %d); its command works until %s",
				w.sim.step, pod.Name, p.fence, p.workUntil.Format("15:04:05.000"))
			p.until = time.Time{}
			return true
		}
		if !named {
			return false
		}
	}
	return w.renew(pod, p, name, l, fence)
}

// renew renews the grant on the version of the Lease the process saw, with
// a compare-and-swap of renewTime, as the pod itself (the admission policy
// judges it).
func (w *world) renew(pod *corev1.Pod, p *proc, name string, l *coordinationv1.Lease, fence int64) bool {
	now := w.now()
	next := l.DeepCopy()
	next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	w.sim.tracef("step %d: process of %s renews fence %d", w.sim.step, pod.Name, fence)
	if err := w.asPod(pod, policy.Update, l, next); err != nil {
		return true // a conflict: it reads again next time
	}
	if w.sim.chance(w.sim.cfg.LostReplies) {
		w.sim.tracef("  lost reply: the process does not know that its renewal succeeded")
		return true
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	p.until, p.fence, p.lease = now.Add(d-p.margin), fence, name
	return true
}

// release stops the command at once (its work is over) and then releases
// the grant, held or revoked, with a compare-and-swap on the Lease as the
// process last saw it (as fence run does once its command has exited).
func (w *world) release(pod *corev1.Pod, p *proc) bool {
	if p.lease == "" || p.until.IsZero() && !p.workHolder {
		return false
	}
	l := &coordinationv1.Lease{}
	if w.sim.store.get(p.view, types.NamespacedName{Namespace: w.namespace, Name: p.lease}, l) != nil ||
		types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]) != pod.UID {
		return false
	}
	switch l.Annotations[fencingv1alpha1.LeaseAnnotationState] {
	case fencingv1alpha1.LeaseStateHeld, fencingv1alpha1.LeaseStateRevoked:
	default:
		return false
	}
	p.until, p.workUntil, p.workHolder = time.Time{}, time.Time{}, false
	next := l.DeepCopy()
	next.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStateReleased
	w.sim.tracef("step %d: process of %s stops and releases fence %s", w.sim.step, pod.Name, l.Annotations[fencingv1alpha1.AnnotationFence])
	_ = w.asPod(pod, policy.Update, l, next)
	return true
}

// asPod writes a Lease as the pod, through the admission policy.
func (w *world) asPod(pod *corev1.Pod, op string, old, obj *coordinationv1.Lease) error {
	req := policy.Request{Resource: policy.Leases, Operation: op, User: "system:serviceaccount:" + w.namespace + ":default",
		PodUID: string(pod.UID), Old: old, New: obj}
	if !policy.Allows(w.sim.principals, req) {
		w.sim.tracef("  denied by the admission policy")
		w.sim.stats.PolicyDenials++
		return fmt.Errorf("denied by the admission policy")
	}
	return w.write(obj, w.c().Update(context.Background(), obj))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
