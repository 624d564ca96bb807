package sim

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// ShardsConfig chooses the FencedShardSets of a run and what may happen to
// their pods.
type ShardsConfig struct {
	// Sets is how many FencedShardSets the run has (1 when 0), each
	// selecting pods of its own (app=<set>).
	Sets int
	// Pods is how many pods each set starts with (3 when 0).
	Pods int
	// Takeover is the takeover policy of every set ("" picks one at random
	// per set).
	Takeover fencingv1alpha1.TakeoverPolicy
	// SpecChanges lets the sets' user change them too: resize them, switch
	// their takeover policy, delete them and create them again
	// (shardspec.go).
	SpecChanges bool
}

// shardKinds are the kinds the replicas' caches serve in a run with shard
// sets.
var shardKinds = []string{"FencedShardSet", "Lease", "Pod", "Node"}

// shardWorld is everything around the operators in a run with shard sets:
// the sets, their pods and nodes, and what happens to them.
type shardWorld struct {
	sim   *Sim
	cfg   ShardsConfig
	sets  []string
	check *shardChecker
}

func newShardWorld(s *Sim, cfg ShardsConfig) *shardWorld {
	if cfg.Sets <= 0 {
		cfg.Sets = 1
	}
	if cfg.Pods <= 0 {
		cfg.Pods = 3
	}
	return &shardWorld{sim: s, cfg: cfg, check: newShardChecker()}
}

// setUp creates the nodes, the sets (with 4 to 8 shards counted, or a list
// of keys; a takeover policy, a join delay and a cap on moves chosen by the
// seed) and their pods.
func (sw *shardWorld) setUp() error {
	w := sw.sim.world
	for i := 0; i < w.cfg.Nodes; i++ {
		if err := w.write(w.create(node(fmt.Sprintf("n%d", i)))); err != nil {
			return err
		}
	}
	for i := 0; i < sw.cfg.Sets; i++ {
		name := fmt.Sprintf("s%d", i)
		sw.sets = append(sw.sets, name)
		set := sw.newSet(name)
		if err := w.write(w.create(set)); err != nil {
			return err
		}
		sw.sim.tracef("set %s: %d shards %v, takeover %s", name, set.Spec.Shards, set.Spec.Keys, set.Spec.Takeover)
	}
	w.podsFrom = sw.sim.store.rev
	for range sw.cfg.Pods * sw.cfg.Sets {
		if err := sw.addPod(); err != nil {
			return err
		}
	}
	return nil
}

// addPod creates a pod of a random set, ready for a while already.
func (sw *shardWorld) addPod() error {
	w := sw.sim.world
	name := fmt.Sprintf("p%d", w.pods)
	w.pods++
	set := sw.sets[sw.sim.rng.Intn(len(sw.sets))]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: name, Labels: map[string]string{"app": set, "name": name},
			Finalizers: []string{podFinalizer}},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("n%d", sw.sim.rng.Intn(w.cfg.Nodes)),
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if _, err := w.create(pod); err != nil {
		return err
	}
	if err := w.write(pod, nil); err != nil {
		return err
	}
	since := w.now().Add(-time.Duration(sw.sim.rng.Intn(100)) * time.Second)
	setReady(pod, since, true)
	return w.write(pod, w.c().Status().Update(w.ctx, pod))
}

// shardChangeWeights say how often each change happens to the pods and
// nodes of the shard sets: pods flap, join and leave often; nodes are lost
// and come back.
var shardChangeWeights = map[string]int{
	"pod-ready": 12, "pod-not-ready": 8, "pod-failed": 1, "pod-delete": 4, "pod-gone": 4, "pod-create": 6,
	"node-lost": 2, "node-back": 4,
}

// change makes one random change to the shard world.
func (sw *shardWorld) change() bool {
	w := sw.sim.world
	if w.cfg.NoChanges {
		return false
	}
	all := map[string]func() (bool, error){
		"pod-ready": func() (bool, error) {
			return w.onPod(func(p *corev1.Pod) bool { return setReady(p, w.now(), true) }, true)
		},
		"pod-not-ready": func() (bool, error) {
			return w.onPod(func(p *corev1.Pod) bool { return setReady(p, w.now(), false) }, true)
		},
		"pod-failed": func() (bool, error) {
			return w.onPod(func(p *corev1.Pod) bool { p.Status.Phase = corev1.PodFailed; return true }, true)
		},
		"pod-delete":   w.deletePod,
		"pod-gone":     w.finishPod,
		"pod-create":   func() (bool, error) { return true, sw.addPod() },
		"node-lost":    func() (bool, error) { return w.onNode(true) },
		"node-back":    func() (bool, error) { return w.onNode(false) },
		"set-resize":   sw.resize,
		"set-takeover": sw.toggleTakeover,
		"set-delete":   sw.deleteSet,
		"gc":           func() (bool, error) { return sw.collectGarbage(), nil },
	}
	var names []string
	for n, weight := range shardChangeWeights {
		for range weight {
			names = append(names, n)
		}
	}
	for n, weight := range shardSpecWeights {
		for range weight * boolInt(sw.cfg.SpecChanges) {
			names = append(names, n)
		}
	}
	sortStrings(names)
	name := names[sw.sim.rng.Intn(len(names))]
	sw.sim.tracef("step %d: world: %s", sw.sim.step, name)
	ok, err := all[name]()
	if err != nil {
		sw.sim.checker.violations = append(sw.sim.checker.violations, fmt.Sprintf("world change %s failed: %v", name, err))
		return true
	}
	if ok {
		sw.sim.stats.WorldChanges++
	}
	return ok
}

// podState describes a pod's phase, readiness and deletion, for traces.
func podState(obj client.Object) string {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return ""
	}
	out := fmt.Sprintf(" app=%s node=%s phase=%s containersReady=%s", p.Labels["app"], p.Spec.NodeName, p.Status.Phase, conditionStatus(p, corev1.ContainersReady))
	if p.DeletionTimestamp != nil {
		out += " deleting"
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
