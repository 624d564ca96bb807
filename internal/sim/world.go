package sim

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// WorldConfig chooses the workload of a run and what may happen to it.
type WorldConfig struct {
	// Pods is how many candidate pods the FencedLease starts with.
	Pods int
	// Nodes is how many nodes they run on.
	Nodes int
	// Takeover is the takeover policy of the FencedLease ("" picks one at
	// random per run).
	Takeover fencingv1alpha1.TakeoverPolicy
	// Renewal is the renewal mode of the FencedLease ("" picks one at random
	// per run).
	Renewal fencingv1alpha1.RenewalMode
	// LeaseDurationSeconds of the FencedLease.
	LeaseDurationSeconds int32
	// NoChanges keeps the world still: only the operators act.
	NoChanges bool
	// Changes, when set, restricts the world's changes to these names (see
	// world.changes).
	Changes []string
	// ChangeWeight is how often the world changes, against the operators'
	// steps (about 80 in all); 3 when 0.
	ChangeWeight int
}

func (c WorldConfig) changeWeight() int {
	if c.ChangeWeight <= 0 {
		return 3
	}
	return c.ChangeWeight
}

// podFinalizer stands for the kubelet: a deleted pod keeps running, with a
// deletionTimestamp, until the world lets it finish.
const podFinalizer = "sim.fencedlease.io/kubelet"

// world is everything around the operators: the FencedLeases users create,
// the pods and nodes, and what happens to them.
type world struct {
	sim       *Sim
	cfg       WorldConfig
	namespace string
	pods      int
	ctx       context.Context
	// recreate is set once FencedLease db was deleted: its user creates it
	// again as soon as the name is free, now and then with a selector that
	// leaves out except, the pod that held it.
	recreate bool
	except   string
	// podsFrom is the store's revision before the first pod was created.
	podsFrom int64
}

func newWorld(s *Sim, cfg WorldConfig) *world {
	if cfg.Pods == 0 {
		cfg.Pods = 3
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.LeaseDurationSeconds == 0 {
		cfg.LeaseDurationSeconds = 10
	}
	return &world{sim: s, cfg: cfg, namespace: "ns", ctx: context.Background()}
}

func (w *world) c() client.Client { return w.sim.store.head }

func (w *world) setUp() error {
	for i := 0; i < w.cfg.Nodes; i++ {
		if err := w.write(w.create(node(fmt.Sprintf("n%d", i)))); err != nil {
			return err
		}
	}
	takeover := w.cfg.Takeover
	if takeover == "" {
		takeover = []fencingv1alpha1.TakeoverPolicy{fencingv1alpha1.TakeoverSafe, fencingv1alpha1.TakeoverImmediate}[w.sim.rng.Intn(2)]
	}
	renewal := w.cfg.Renewal
	if renewal == "" {
		renewal = []fencingv1alpha1.RenewalMode{fencingv1alpha1.RenewalOperator, fencingv1alpha1.RenewalHolder}[w.sim.rng.Intn(2)]
	}
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: "db"},
		Spec: fencingv1alpha1.FencedLeaseSpec{
			Selector:             metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			LeaseDurationSeconds: w.cfg.LeaseDurationSeconds,
			Takeover:             takeover,
			Renewal:              renewal,
		},
	}
	if err := w.write(w.create(fl)); err != nil {
		return err
	}
	if w.sim.rng.Intn(4) == 0 {
		// As an operator process before this one left it: no capacity for
		// a first grant.
		meta.SetStatusCondition(&fl.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionHeld, Status: metav1.ConditionFalse,
			Reason: fencingv1alpha1.ReasonWaitingForCapacity, Message: "left by a process before"})
		if err := w.write(fl, w.c().Status().Update(w.ctx, fl)); err != nil {
			return err
		}
	}
	w.podsFrom = w.sim.store.rev
	for i := 0; i < w.cfg.Pods; i++ {
		if err := w.addPod(); err != nil {
			return err
		}
	}
	// The protected objects, created by someone allowed to write them
	// without a fence (a break-glass user): the holders write them next.
	for lease, names := range protectedObjects {
		for _, name := range names {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: name,
				Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: lease}}}
			if err := w.write(w.create(cm)); err != nil {
				return err
			}
		}
	}
	return nil
}

// change makes one random change to the world.
func (w *world) change() bool {
	if w.cfg.NoChanges {
		return false
	}
	all := w.changes()
	names := w.cfg.Changes
	if len(names) == 0 {
		for n := range changeWeights {
			for i := 0; i < changeWeights[n]; i++ {
				names = append(names, n)
			}
		}
		sortStrings(names)
	}
	name := names[w.sim.rng.Intn(len(names))]
	w.sim.tracef("step %d: world: %s", w.sim.step, name)
	ok, err := all[name]()
	if err != nil {
		w.sim.checker.violations = append(w.sim.checker.violations, fmt.Sprintf("world change %s failed: %v", name, err))
		return true
	}
	if ok {
		w.sim.stats.WorldChanges++
	}
	return ok
}

// changeWeights say how often each change happens, relative to the others:
// pods come and go and nodes fail often, users reconfigure or delete things
// rarely.
var changeWeights = map[string]int{
	"pod-ready": 12, "pod-not-ready": 8, "pod-failed": 2, "pod-completed": 2, "pod-delete": 4, "pod-gone": 4, "pod-create": 6,
	"pod-relabel": 2, "pod-team": 2, "node-lost": 2, "node-back": 4,
	"lease-delete": 1, "other-toggle": 2, "takeover-toggle": 1, "paused-toggle": 1, "maxhold-toggle": 1, "fencedlease-gone": 2,
	"renewal-toggle": 1, "left-waiting": 1, "editor-tampers": 2,
}

// changes are the things that happen to a singleton workload.
func (w *world) changes() map[string]func() (bool, error) {
	return map[string]func() (bool, error){
		"pod-ready": func() (bool, error) {
			return w.onPod(func(p *corev1.Pod) bool { return setReady(p, w.now(), true) }, true)
		},
		"pod-not-ready": func() (bool, error) {
			return w.onPod(func(p *corev1.Pod) bool { return setReady(p, w.now(), false) }, true)
		},
		"pod-completed": func() (bool, error) { return w.onPod(completed, true) },
		"pod-failed": func() (bool, error) {
			return w.onPod(func(p *corev1.Pod) bool { p.Status.Phase = corev1.PodFailed; return true }, true)
		},
		"pod-delete":       w.deletePod,
		"pod-gone":         w.finishPod,
		"pod-create":       func() (bool, error) { return true, w.addPod() },
		"pod-relabel":      func() (bool, error) { return w.onPod(toggleLabel("app", "db"), false) },
		"pod-team":         func() (bool, error) { return w.onPod(toggleLabel("team", "x"), false) },
		"node-lost":        func() (bool, error) { return w.onNode(true) },
		"node-back":        func() (bool, error) { return w.onNode(false) },
		"lease-delete":     w.deleteLease,
		"other-toggle":     w.toggleOther,
		"takeover-toggle":  w.toggleTakeover,
		"paused-toggle":    w.togglePaused,
		"maxhold-toggle":   w.toggleMaxHold,
		"renewal-toggle":   w.toggleRenewal,
		"fencedlease-gone": w.deleteFencedLease,
		"left-waiting":     w.leftWaiting,
		"editor-tampers":   w.editorTampers,
	}
}

func (w *world) now() time.Time { return w.sim.clock.Now() }

// write records a world write in the history and checks the invariants.
func (w *world) write(obj client.Object, err error) error {
	if err != nil {
		return err
	}
	k, err := w.sim.store.keyOf(obj)
	if err != nil {
		return err
	}
	stored, err := w.sim.store.record(k)
	if err != nil {
		return err
	}
	if w.sim.shards != nil && k.kind == "Pod" {
		w.sim.tracef("  world => %s %s%s", k, summary(stored), podState(stored))
	}
	w.sim.checker.afterWrite(w.sim, k, "world")
	return nil
}

func (w *world) create(obj client.Object) (client.Object, error) {
	if obj.GetUID() == "" {
		obj.SetUID(w.sim.store.newUID())
	}
	obj.SetCreationTimestamp(metav1.NewTime(w.now()))
	return obj, w.c().Create(w.ctx, obj)
}

func node(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

func (w *world) addPod() error {
	name := fmt.Sprintf("p%d", w.pods)
	w.pods++
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: name, Labels: map[string]string{"app": "db", "name": name},
			Finalizers: []string{podFinalizer}},
		Spec: corev1.PodSpec{
			NodeName:       fmt.Sprintf("n%d", w.sim.rng.Intn(w.cfg.Nodes)),
			Containers:     []corev1.Container{{Name: "app", Image: "app"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: fencingv1alpha1.ConditionHolder}},
		},
	}
	if _, err := w.create(pod); err != nil {
		return err
	}
	if err := w.write(pod, nil); err != nil {
		return err
	}
	since := w.now().Add(-time.Duration(w.sim.rng.Intn(100)) * time.Second)
	setReady(pod, since, true)
	return w.write(pod, w.c().Status().Update(w.ctx, pod))
}

// setReady sets the pod's status as the kubelet does.
func setReady(p *corev1.Pod, at time.Time, ready bool) bool {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
		p.Status.Phase = corev1.PodRunning
	}
	t := metav1.NewTime(at.Truncate(time.Second))
	for _, typ := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		found := false
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == typ {
				found = true
				if p.Status.Conditions[i].Status != status {
					p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = status, t
				}
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: t})
		}
	}
	return true
}

// terminal says whether a pod's phase is Succeeded or Failed: the kubelet
// never moves such a pod back to Running.
func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// completed is the kubelet reporting a pod finished: every container
// terminated, phase Succeeded.
func completed(p *corev1.Pod) bool {
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}})
	}
	setReady(p, time.Now(), false)
	return true
}

func toggleLabel(key, value string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		if p.Labels[key] == value {
			delete(p.Labels, key)
		} else {
			p.Labels[key] = value
		}
		return true
	}
}

// pickPod returns a random pod of the namespace that still exists.
func (w *world) pickPod() *corev1.Pod {
	var list corev1.PodList
	if err := w.sim.store.list(w.sim.store.rev, &list, client.InNamespace(w.namespace)); err != nil || len(list.Items) == 0 {
		return nil
	}
	return &list.Items[w.sim.rng.Intn(len(list.Items))]
}

// onPod changes a random pod, its status or its metadata.
func (w *world) onPod(mutate func(*corev1.Pod) bool, status bool) (bool, error) {
	pod := w.pickPod()
	if pod == nil || status && terminal(pod) || !mutate(pod) {
		return false, nil
	}
	if status {
		return true, w.write(pod, w.c().Status().Update(w.ctx, pod))
	}
	return true, w.write(pod, w.c().Update(w.ctx, pod))
}

// deletePod deletes a pod gracefully: it goes on running, being deleted.
func (w *world) deletePod() (bool, error) {
	pod := w.pickPod()
	if pod == nil || pod.DeletionTimestamp != nil {
		return false, nil
	}
	return true, w.write(pod, w.c().Delete(w.ctx, pod))
}

// finishPod ends a pod being deleted, or force-deletes one (as on a lost
// node).
func (w *world) finishPod() (bool, error) {
	pod := w.pickPod()
	if pod == nil {
		return false, nil
	}
	pod.Finalizers = nil
	if err := w.write(pod, w.c().Update(w.ctx, pod)); err != nil {
		return true, err
	}
	if pod.DeletionTimestamp == nil {
		err := w.c().Delete(w.ctx, pod)
		return true, w.write(pod, client.IgnoreNotFound(err))
	}
	return true, nil
}

// onNode makes a random node lost (Ready Unknown and the unreachable taint,
// as the node lifecycle controller does) or brings it back.
func (w *world) onNode(lost bool) (bool, error) {
	n := &corev1.Node{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Name: fmt.Sprintf("n%d", w.sim.rng.Intn(w.cfg.Nodes))}, n); err != nil {
		return false, err
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	n.Spec.Taints = nil
	if lost {
		n.Status.Conditions[0].Status = corev1.ConditionUnknown
		n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	}
	return true, w.write(n, w.c().Update(w.ctx, n))
}

func (w *world) deleteLease() (bool, error) {
	l := &coordinationv1.Lease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, l); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, w.write(l, w.c().Delete(w.ctx, l))
}

// toggleOther creates or deletes a second FencedLease whose selector
// (team=x) overlaps the first one's on pods that carry both labels.
func (w *world) toggleOther() (bool, error) {
	fl := &fencingv1alpha1.FencedLease{}
	err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "other"}, fl)
	switch {
	case apierrors.IsNotFound(err):
		fl = &fencingv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: "other"},
			Spec: fencingv1alpha1.FencedLeaseSpec{
				Selector:             metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}},
				LeaseDurationSeconds: w.cfg.LeaseDurationSeconds,
				Takeover:             fencingv1alpha1.TakeoverImmediate,
			},
		}
		_, err := w.create(fl)
		return true, w.write(fl, err)
	case err != nil:
		return false, err
	case fl.DeletionTimestamp != nil:
		return false, nil
	}
	return true, w.write(fl, w.c().Delete(w.ctx, fl))
}

// onSpec changes the spec of FencedLease db.
func (w *world) onSpec(mutate func(*fencingv1alpha1.FencedLeaseSpec)) (bool, error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, fl); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	mutate(&fl.Spec)
	fl.Generation++
	return true, w.write(fl, w.c().Update(w.ctx, fl))
}

func (w *world) toggleTakeover() (bool, error) {
	return w.onSpec(func(s *fencingv1alpha1.FencedLeaseSpec) {
		if s.Takeover == fencingv1alpha1.TakeoverImmediate {
			s.Takeover = fencingv1alpha1.TakeoverSafe
		} else {
			s.Takeover = fencingv1alpha1.TakeoverImmediate
		}
	})
}

func (w *world) toggleRenewal() (bool, error) {
	return w.onSpec(func(s *fencingv1alpha1.FencedLeaseSpec) {
		if s.Renewal == fencingv1alpha1.RenewalHolder {
			s.Renewal = fencingv1alpha1.RenewalOperator
		} else {
			s.Renewal = fencingv1alpha1.RenewalHolder
		}
	})
}

func (w *world) togglePaused() (bool, error) {
	return w.onSpec(func(s *fencingv1alpha1.FencedLeaseSpec) { s.Paused = !s.Paused })
}

func (w *world) toggleMaxHold() (bool, error) {
	return w.onSpec(func(s *fencingv1alpha1.FencedLeaseSpec) {
		if s.MaxHoldSeconds == 0 {
			s.MaxHoldSeconds = 3 * s.LeaseDurationSeconds
		} else {
			s.MaxHoldSeconds = 0
		}
	})
}

// deleteFencedLease deletes FencedLease db; its user creates it again once
// it is gone (recreateSoon).
func (w *world) deleteFencedLease() (bool, error) {
	fl := &fencingv1alpha1.FencedLease{}
	err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, fl)
	switch {
	case apierrors.IsNotFound(err):
		w.recreate = true
		return w.recreateSoon(), nil
	case err != nil:
		return false, err
	case fl.DeletionTimestamp != nil:
		return false, nil
	}
	w.recreate, w.except = true, ""
	l := &coordinationv1.Lease{}
	if w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, l) == nil {
		w.except = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	return true, w.write(fl, w.c().Delete(w.ctx, fl))
}

// recreateSoon creates FencedLease db again, as soon as the name is free
// after its deletion, with a takeover and a renewal mode of its own and,
// every other time, a selector that leaves out the pod that held it.
func (w *world) recreateSoon() bool {
	if !w.recreate {
		return false
	}
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, fl); !apierrors.IsNotFound(err) {
		return false
	}
	w.recreate = false
	fl = &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: "db"},
		Spec: fencingv1alpha1.FencedLeaseSpec{
			Selector:             metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			LeaseDurationSeconds: w.cfg.LeaseDurationSeconds,
			Takeover:             []fencingv1alpha1.TakeoverPolicy{fencingv1alpha1.TakeoverSafe, fencingv1alpha1.TakeoverImmediate}[w.sim.rng.Intn(2)],
			Renewal:              []fencingv1alpha1.RenewalMode{fencingv1alpha1.RenewalOperator, fencingv1alpha1.RenewalHolder}[w.sim.rng.Intn(2)],
		},
	}
	if w.except != "" && w.sim.rng.Intn(2) == 0 {
		fl.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.except}}}
	}
	w.sim.tracef("step %d: world: FencedLease db created again (%s, %s, leaving out %q)", w.sim.step, fl.Spec.Takeover, fl.Spec.Renewal, w.except)
	_, err := w.create(fl)
	if err := w.write(fl, err); err != nil {
		w.sim.checker.violations = append(w.sim.checker.violations, "create FencedLease db again: "+err.Error())
	}
	return true
}

// leftWaiting creates FencedLease other as a previous operator process left
// it when it had no capacity for a first grant (Held=False,
// WaitingForCapacity), and restarts every replica: a restarted operator
// must grant it once it has measured its load.
func (w *world) leftWaiting() (bool, error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "other"}, fl); !apierrors.IsNotFound(err) {
		return false, client.IgnoreNotFound(err)
	}
	fl = &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: "other"},
		Spec: fencingv1alpha1.FencedLeaseSpec{
			Selector:             metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}},
			LeaseDurationSeconds: w.cfg.LeaseDurationSeconds,
			Takeover:             fencingv1alpha1.TakeoverImmediate,
		},
	}
	if _, err := w.create(fl); err != nil {
		return true, err
	}
	meta.SetStatusCondition(&fl.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionHeld, Status: metav1.ConditionFalse,
		Reason: fencingv1alpha1.ReasonWaitingForCapacity, Message: "left by a process before"})
	if err := w.write(fl, w.c().Status().Update(w.ctx, fl)); err != nil {
		return true, err
	}
	for _, r := range w.sim.replicas {
		w.sim.tracef("step %d: replica %d restarts", w.sim.step, r.id)
		w.sim.crash(r)
		w.sim.restart(r)
	}
	return true, nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
