package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/policy"
)

// Script is a simulation whose every step the caller chooses: which replica
// runs which reconcile how far, when caches catch up, what happens to the
// world and to the clock. It replays a known interleaving exactly, so that
// each finding becomes a regression test. The invariants are checked after
// every write, as in a random run.
type Script struct {
	s *Sim
	// frozen are the caches that do not catch up before a reconcile starts.
	frozen map[int]map[string]bool
}

// NewScript sets up a world of nodes n0..n2 and the given replicas, with no
// FencedLease and no pod yet.
func NewScript(replicas int, indexes []Index, newRec NewReconciler) (*Script, error) {
	st, err := newStore(indexes)
	if err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:    Config{Trace: true},
		store:  st,
		clock:  clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		newRec: newRec,
		kinds:  kinds,
	}
	s.checker = newChecker()
	s.procs = procs{}
	s.principals = policy.Principals{OperatorUsers: []string{operatorUser}}
	s.world = newWorld(s, WorldConfig{Nodes: 3})
	for i := 0; i < 3; i++ {
		if err := s.world.write(s.world.create(node(fmt.Sprintf("n%d", i)))); err != nil {
			return nil, err
		}
	}
	for i := 0; i < replicas; i++ {
		r := &replica{id: i, running: map[types.NamespacedName]*actor{}}
		s.restart(r)
		s.replicas = append(s.replicas, r)
	}
	return &Script{s: s, frozen: map[int]map[string]bool{}}, nil
}

// Violations are the invariants broken so far.
func (sc *Script) Violations() []string { return sc.s.checker.violations }

// Trace is what happened so far.
func (sc *Script) Trace() string { return strings.Join(sc.s.trace, "\n") }

// Now is the simulated time.
func (sc *Script) Now() time.Time { return sc.s.clock.Now() }

// Advance moves the clock.
func (sc *Script) Advance(d time.Duration) {
	sc.s.clock.SetTime(sc.s.clock.Now().Add(d))
	sc.s.tracef("clock +%s", d)
}

// Freeze stops the given caches of a replica (all when none is named) from
// catching up: they keep serving what they serve now.
func (sc *Script) Freeze(replica int, kinds ...string) {
	if len(kinds) == 0 {
		kinds = append(kinds, storedKindNames()...)
	}
	if sc.frozen[replica] == nil {
		sc.frozen[replica] = map[string]bool{}
	}
	for _, k := range kinds {
		sc.frozen[replica][k] = true
	}
}

// Thaw lets the caches of a replica catch up again.
func (sc *Script) Thaw(replica int) { delete(sc.frozen, replica) }

func storedKindNames() []string { return append([]string(nil), kinds...) }

// CatchUp brings every cache of the replica that is not frozen to now,
// without reconciling anything.
func (sc *Script) CatchUp(replica int) { sc.catchUp(replica) }

// catchUp brings every cache of the replica that is not frozen to now.
func (sc *Script) catchUp(replica int) {
	r := sc.s.replicas[replica]
	for _, k := range sc.s.kinds {
		if !sc.frozen[replica][k] {
			r.views[k] = sc.s.store.rev
		}
	}
}

// Reconcile runs one whole reconcile of FencedLease name on a replica, its
// caches caught up first (except frozen ones).
func (sc *Script) Reconcile(replica int, name string) {
	sc.Start(replica, name)
	sc.Finish(replica, name)
}

// Settle reconciles name on a replica until a reconcile writes nothing, at
// most n times.
func (sc *Script) Settle(replica int, name string, n int) {
	for i := 0; i < n; i++ {
		before := sc.s.store.rev
		sc.Reconcile(replica, name)
		if sc.s.store.rev == before {
			return
		}
	}
}

// Start starts a reconcile of name on a replica and lets it run until its
// first API call that the scheduler holds (a write or a live read).
func (sc *Script) Start(replica int, name string) {
	sc.catchUp(replica)
	r := sc.s.replicas[replica]
	key := types.NamespacedName{Namespace: sc.s.world.namespace, Name: name}
	if r.running[key] != nil {
		panic(fmt.Sprintf("replica %d already reconciles %s", replica, key))
	}
	a := &actor{rep: r, key: key, calls: make(chan *call), done: make(chan struct{})}
	r.running[key] = a
	sc.s.tracef("replica %d starts reconciling %s", replica, key)
	ctx := withActor(a)
	rec := r.rec
	go func() {
		defer close(a.done)
		_, _ = rec.Reconcile(ctx, reconcileRequest(key))
	}()
	sc.s.await(a)
}

// Next describes the call a running reconcile waits on, or "" when it has
// finished.
func (sc *Script) Next(replica int, name string) string {
	a := sc.actor(replica, name)
	if a == nil || a.next == nil {
		return ""
	}
	return a.next.desc
}

// Step runs the call the reconcile waits on. It returns false when the
// reconcile has finished.
func (sc *Script) Step(replica int, name string) bool {
	return sc.answer(replica, name, func(c *call) error {
		err := c.exec()
		if err != nil {
			sc.s.tracef("  -> %s", firstLine(err.Error()))
		}
		return err
	})
}

// Fail answers the call the reconcile waits on with an error, as a request
// that timed out before it reached the API server, without running it. It
// returns false when the reconcile has finished.
func (sc *Script) Fail(replica int, name string) bool {
	return sc.answer(replica, name, func(*call) error {
		sc.s.tracef("  -> failed by the script")
		return context.DeadlineExceeded
	})
}

// answer replies to the call the reconcile waits on with what reply
// returns, and waits for the reconcile's next call or its end. It returns
// false when the reconcile has finished.
func (sc *Script) answer(replica int, name string, reply func(*call) error) bool {
	a := sc.actor(replica, name)
	if a == nil || a.next == nil {
		return false
	}
	c := a.next
	sc.s.tracef("%s", c.desc)
	c.reply <- reply(c)
	sc.s.await(a)
	return true
}

// RunUntil runs the reconcile's calls until the call it waits on contains
// want, without running that one. It returns false if the reconcile finished
// first.
func (sc *Script) RunUntil(replica int, name, want string) bool {
	for {
		next := sc.Next(replica, name)
		if next == "" {
			return false
		}
		if strings.Contains(next, want) {
			return true
		}
		sc.Step(replica, name)
	}
}

// Finish runs the reconcile to its end.
func (sc *Script) Finish(replica int, name string) {
	for sc.Step(replica, name) {
	}
}

// Crash crashes a replica and restarts it with empty memory.
func (sc *Script) Crash(replica int) {
	r := sc.s.replicas[replica]
	sc.s.tracef("replica %d crashes and restarts", replica)
	sc.s.crash(r)
	sc.s.restart(r)
}

func (sc *Script) actor(replica int, name string) *actor {
	return sc.s.replicas[replica].running[types.NamespacedName{Namespace: sc.s.world.namespace, Name: name}].runner()
}

// FencedLease creates a FencedLease selecting the labels.
func (sc *Script) FencedLease(name string, labels map[string]string, mutate func(*fencingv1alpha1.FencedLease)) error {
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: sc.s.world.namespace, Name: name},
		Spec: fencingv1alpha1.FencedLeaseSpec{
			Selector:             metav1.LabelSelector{MatchLabels: labels},
			LeaseDurationSeconds: 10,
			Takeover:             fencingv1alpha1.TakeoverSafe,
		},
	}
	if mutate != nil {
		mutate(fl)
	}
	sc.s.tracef("world: create FencedLease %s", name)
	return sc.s.world.write(sc.s.world.create(fl))
}

// LeftWaiting writes a FencedLease's status as an operator process before
// this one left it when it had no capacity for a first grant: Held=False,
// WaitingForCapacity.
func (sc *Script) LeftWaiting(name string) error {
	w := sc.s.world
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, fl); err != nil {
		return err
	}
	meta.SetStatusCondition(&fl.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionHeld, Status: metav1.ConditionFalse,
		Reason: fencingv1alpha1.ReasonWaitingForCapacity, Message: "left by a process before"})
	sc.s.tracef("world: FencedLease %s was left waiting for capacity", name)
	return w.write(fl, w.c().Status().Update(w.ctx, fl))
}

// UpdateFencedLease changes a FencedLease's spec, as its user would.
func (sc *Script) UpdateFencedLease(name string, mutate func(*fencingv1alpha1.FencedLease)) error {
	w := sc.s.world
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, fl); err != nil {
		return err
	}
	mutate(fl)
	sc.s.tracef("world: update FencedLease %s", name)
	return w.write(fl, w.c().Update(w.ctx, fl))
}

// Pod creates a Running pod on a node, its containers ready for readyFor.
func (sc *Script) Pod(name, node string, labels map[string]string, readyFor time.Duration) error {
	w := sc.s.world
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	sc.s.tracef("world: create pod %s on %s", name, node)
	if err := w.write(w.create(pod)); err != nil {
		return err
	}
	setReady(pod, w.now().Add(-readyFor), true)
	return w.write(pod, w.c().Status().Update(w.ctx, pod))
}

// SetReady sets a pod's containers ready or not, as its kubelet would.
func (sc *Script) SetReady(name string, ready bool) error {
	return sc.onPod(name, true, func(p *corev1.Pod) { setReady(p, sc.Now(), ready) })
}

// Annotate sets an annotation on a pod, as a user with edit rights may.
func (sc *Script) Annotate(name, key, value string) error {
	return sc.onPod(name, false, func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
	})
}

// Relabel sets a label on a pod, or removes it when value is empty, as a
// user or a controller changing the pod's labels would.
func (sc *Script) Relabel(name, key, value string) error {
	return sc.onPod(name, false, func(p *corev1.Pod) {
		if value == "" {
			delete(p.Labels, key)
			return
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[key] = value
	})
}

func (sc *Script) onPod(name string, status bool, mutate func(*corev1.Pod)) error {
	w := sc.s.world
	pod := &corev1.Pod{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, pod); err != nil {
		return err
	}
	mutate(pod)
	sc.s.tracef("world: change pod %s", name)
	if status {
		return w.write(pod, w.c().Status().Update(w.ctx, pod))
	}
	return w.write(pod, w.c().Update(w.ctx, pod))
}

// LoseNode marks a node lost as the node lifecycle controller does: Ready
// Unknown and the unreachable taint; its pods' containers still read ready.
func (sc *Script) LoseNode(name string) error {
	w := sc.s.world
	n := &corev1.Node{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Name: name}, n); err != nil {
		return err
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	sc.s.tracef("world: node %s is lost", name)
	return w.write(n, w.c().Update(w.ctx, n))
}

// HolderRenews lets the process of a pod renew its own grant of Lease db
// (holder renewal), as it reads the Lease now: it then believes it holds for
// a lease duration. It reports whether the process renewed.
func (sc *Script) HolderRenews(pod string) bool {
	w := sc.s.world
	p, l := &corev1.Pod{}, &coordinationv1.Lease{}
	if w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: pod}, p) != nil ||
		w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, l) != nil ||
		types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]) != p.UID {
		return false
	}
	proc := sc.s.procs.of(p.UID)
	proc.view = sc.s.store.rev
	w.learnFromLease(p, proc, "db", l, w.now())
	return w.now().Before(proc.until)
}

// DeleteLease deletes the Lease of a FencedLease behind the operator's back.
func (sc *Script) DeleteLease(name string) error {
	w := sc.s.world
	l := &coordinationv1.Lease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, l); err != nil {
		return err
	}
	sc.s.tracef("world: delete Lease %s", name)
	return w.write(l, w.c().Delete(w.ctx, l))
}

// DeleteFencedLease deletes a FencedLease, as its user would; the operator's
// finalizer keeps it until a replica lets it go.
func (sc *Script) DeleteFencedLease(name string) error {
	w := sc.s.world
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, fl); err != nil {
		return err
	}
	sc.s.tracef("world: delete FencedLease %s", name)
	return w.write(fl, w.c().Delete(w.ctx, fl))
}

// Get reads an object as the API server has it now.
func (sc *Script) Get(name string, obj client.Object) error {
	ns := sc.s.world.namespace
	if _, ok := obj.(*corev1.Node); ok {
		ns = ""
	}
	return sc.s.store.get(sc.s.store.rev, types.NamespacedName{Namespace: ns, Name: name}, obj)
}

// Holders lists the pods published as holder of a FencedLease.
func (sc *Script) Holders(lease string) []string {
	var list corev1.PodList
	_ = sc.s.store.list(sc.s.store.rev, &list, client.InNamespace(sc.s.world.namespace))
	var out []string
	for i := range list.Items {
		if l, f := published(&list.Items[i]); l == lease && f != 0 {
			out = append(out, list.Items[i].Name)
		}
	}
	return out
}

func withActor(a *actor) context.Context {
	return logrContext(context.WithValue(context.Background(), actorKey{}, a))
}
