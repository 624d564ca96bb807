package sim

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// shardSpecWeights say how often a set's user changes it, with
// ShardsConfig.SpecChanges: its shards (a count, or a list of keys, growing,
// shrinking or replaced), its takeover policy, or the set itself, deleted
// and created again once it is gone.
var shardSpecWeights = map[string]int{"set-resize": 2, "set-takeover": 1, "set-delete": 1, "gc": 1}

// shardKeyPool is where a set's listed keys come from.
var shardKeyPool = []string{"eu", "us", "asia", "moon", "mars", "sun", "7"}

// newSet is set name as its user first writes it, or again after its
// deletion: shards counted or listed, a takeover policy, a join delay and
// a cap on moves, chosen by the seed.
func (sw *shardWorld) newSet(name string) *fencingv1alpha1.FencedShardSet {
	w, rng := sw.sim.world, sw.sim.rng
	set := &fencingv1alpha1.FencedShardSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: name},
		Spec: fencingv1alpha1.FencedShardSetSpec{
			Selector:             metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			LeaseDurationSeconds: w.cfg.LeaseDurationSeconds,
			Takeover:             sw.cfg.Takeover,
			JoinDelaySeconds:     ptr.To([]int32{0, 5, 30}[rng.Intn(3)]),
		},
	}
	if set.Spec.Takeover == "" {
		set.Spec.Takeover = []fencingv1alpha1.TakeoverPolicy{fencingv1alpha1.TakeoverSafe, fencingv1alpha1.TakeoverImmediate}[rng.Intn(2)]
	}
	if rng.Intn(3) == 0 {
		set.Spec.Keys = []string{"eu", "us", "asia", "moon", "mars"}[:4+rng.Intn(2)]
	} else {
		set.Spec.Shards = int32(4 + rng.Intn(5))
	}
	if rng.Intn(4) == 0 {
		set.Spec.MaxMovesPerInterval = ptr.To(int32(1 + rng.Intn(2)))
	}
	return set
}

// onSet changes the spec of a random set that is not being deleted.
func (sw *shardWorld) onSet(what string, mutate func(*fencingv1alpha1.FencedShardSet)) (bool, error) {
	w := sw.sim.world
	name := sw.sets[sw.sim.rng.Intn(len(sw.sets))]
	set := &fencingv1alpha1.FencedShardSet{}
	if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, set); err != nil || set.DeletionTimestamp != nil {
		return false, client.IgnoreNotFound(err)
	}
	mutate(set)
	set.Generation++
	sw.sim.tracef("step %d: world: set %s %s: %d shards %v, takeover %s", sw.sim.step, name, what, set.Spec.Shards, set.Spec.Keys, set.Spec.Takeover)
	return true, w.write(set, w.c().Update(w.ctx, set))
}

// resize gives a set another number of shards, or another list of keys:
// some kept, some new, in a random order (the order of a list means
// nothing); now and then it switches between counting and listing.
func (sw *shardWorld) resize() (bool, error) {
	rng := sw.sim.rng
	return sw.onSet("resized", func(set *fencingv1alpha1.FencedShardSet) {
		if len(set.Spec.Keys) == 0 && rng.Intn(4) != 0 || len(set.Spec.Keys) > 0 && rng.Intn(4) == 0 {
			set.Spec.Keys, set.Spec.Shards = nil, int32(2+rng.Intn(8))
			return
		}
		keys := append([]string(nil), shardKeyPool...)
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		set.Spec.Keys, set.Spec.Shards = keys[:2+rng.Intn(len(keys)-2)], 0
	})
}

// toggleTakeover switches a set between Safe and Immediate.
func (sw *shardWorld) toggleTakeover() (bool, error) {
	return sw.onSet("switched", func(set *fencingv1alpha1.FencedShardSet) {
		if set.Spec.Takeover == fencingv1alpha1.TakeoverImmediate {
			set.Spec.Takeover = fencingv1alpha1.TakeoverSafe
		} else {
			set.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		}
	})
}

// deleteSet deletes a random set; its user creates it again once it is
// gone (recreateSoon).
func (sw *shardWorld) deleteSet() (bool, error) {
	w := sw.sim.world
	name := sw.sets[sw.sim.rng.Intn(len(sw.sets))]
	set := &fencingv1alpha1.FencedShardSet{}
	err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, set)
	switch {
	case apierrors.IsNotFound(err):
		return sw.recreateSoon(), nil
	case err != nil:
		return false, err
	case set.DeletionTimestamp != nil:
		return false, nil
	}
	sw.sim.tracef("step %d: world: set %s deleted", sw.sim.step, name)
	return true, w.write(set, w.c().Delete(w.ctx, set))
}

// recreateSoon creates a deleted set again as soon as its name is free,
// with a spec of its own.
func (sw *shardWorld) recreateSoon() bool {
	if !sw.cfg.SpecChanges {
		return false
	}
	w := sw.sim.world
	for _, name := range sw.sets {
		err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, &fencingv1alpha1.FencedShardSet{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		set := sw.newSet(name)
		sw.sim.tracef("step %d: world: set %s created again: %d shards %v, takeover %s", sw.sim.step, name, set.Spec.Shards, set.Spec.Keys, set.Spec.Takeover)
		if err := w.write(w.create(set)); err != nil {
			sw.sim.checker.violations = append(sw.sim.checker.violations, fmt.Sprintf("create set %s again: %v", name, err))
		}
		return true
	}
	return false
}

// collectGarbage deletes the shard Leases whose controlling set is gone,
// as the API server's garbage collector does for an owner reference to an
// object that no longer exists: a replica whose cache still showed a
// deleted set may have created one after the set's deletion had cleared
// its Leases.
func (sw *shardWorld) collectGarbage() bool {
	w := sw.sim.world
	leases := &coordinationv1.LeaseList{}
	if err := w.c().List(w.ctx, leases, client.InNamespace(w.namespace), client.HasLabels{record.LabelShardSet}); err != nil {
		return false
	}
	collected := false
	for i := range leases.Items {
		l := &leases.Items[i]
		owner := metav1.GetControllerOf(l)
		if owner == nil {
			continue
		}
		set := &fencingv1alpha1.FencedShardSet{}
		err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: owner.Name}, set)
		if err == nil && set.UID == owner.UID || err != nil && !apierrors.IsNotFound(err) {
			continue
		}
		sw.sim.tracef("step %d: world: garbage collector deletes Lease %s (its set %s is gone)", sw.sim.step, l.Name, owner.UID)
		if err := w.write(l, client.IgnoreNotFound(w.c().Delete(w.ctx, l))); err != nil {
			sw.sim.checker.violations = append(sw.sim.checker.violations, fmt.Sprintf("collect Lease %s: %v", l.Name, err))
		}
		collected = true
	}
	return collected
}
