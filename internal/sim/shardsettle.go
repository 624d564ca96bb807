package sim

import (
	"fmt"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// settleNames are the objects every settling round reconciles.
func (s *Sim) settleNames() []string {
	if s.shards != nil {
		return s.shards.sets
	}
	return []string{"db", "other"}
}

// settleRounds bounds the settling phase of the run: a set whose moves are
// capped rebalances a few shards per lease duration.
func (s *Sim) settleRounds() int {
	if s.shards != nil {
		return 2 * settleRounds
	}
	return settleRounds
}

// unsettledAll is what is not settled yet, of the FencedLeases or of the
// shard sets.
func (s *Sim) unsettledAll() []string {
	if s.shards != nil {
		return s.unsettledShards()
	}
	return s.unsettled()
}

// unsettledShards checks every shard set: with an eligible pod, every shard
// is held by an eligible pod on its Lease, published to that pod with the
// Lease's fence and to no other, and the eligible pods own numbers of
// shards within one of each other.
func (s *Sim) unsettledShards() []string {
	var out []string
	var pods corev1.PodList
	if err := s.store.list(s.store.rev, &pods, client.InNamespace(s.world.namespace)); err != nil {
		return []string{err.Error()}
	}
	var leases coordinationv1.LeaseList
	if err := s.store.list(s.store.rev, &leases, client.InNamespace(s.world.namespace)); err != nil {
		return []string{err.Error()}
	}
	for _, name := range s.shards.sets {
		set, _ := s.store.headObj(objKey{kind: "FencedShardSet", namespace: s.world.namespace, name: name}).(*fencingv1alpha1.FencedShardSet)
		out = append(out, leftOver(name, set, pods.Items, leases.Items)...)
		if set == nil {
			continue
		}
		out = append(out, s.unsettledSet(set, pods.Items)...)
	}
	sort.Strings(out)
	return out
}

func (s *Sim) unsettledSet(set *fencingv1alpha1.FencedShardSet, pods []corev1.Pod) []string {
	sel := labels.SelectorFromSet(set.Spec.Selector.MatchLabels)
	eligible := map[types.UID]int{}
	published := map[string][]string{} // key -> pods publishing it
	fences := map[string]int64{}       // key/pod -> fence
	for i := range pods {
		pod := &pods[i]
		if setOf(pod) == set.Name {
			owned, _ := record.ParseShards(pod.Annotations[record.AnnotationShards])
			for key, fence := range owned {
				published[key] = append(published[key], pod.Name)
				fences[key+"/"+pod.Name] = fence
			}
		}
		if !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		n, _ := s.store.headObj(objKey{kind: "Node", name: pod.Spec.NodeName}).(*corev1.Node)
		if holder.NewCandidate(pod, false, n).Eligible() {
			eligible[pod.UID] = 0
		}
	}
	if len(eligible) == 0 {
		return nil
	}
	var out []string
	for _, key := range set.ShardKeys() {
		l, _ := s.store.headObj(objKey{kind: "Lease", namespace: set.Namespace, name: record.ShardLeaseName(set.Name, key)}).(*coordinationv1.Lease)
		if l == nil {
			out = append(out, fmt.Sprintf("shard %s/%s has no Lease", set.Name, key))
			continue
		}
		rec := record.ParseLease(l.Annotations)
		owner := ptr.Deref(l.Spec.HolderIdentity, "")
		if _, ok := eligible[types.UID(rec.HolderUID)]; !ok || !rec.Held() {
			out = append(out, fmt.Sprintf("shard %s/%s is not held by an eligible pod (%s %s, state %q)", set.Name, key, owner, rec.HolderUID, rec.State))
			continue
		}
		eligible[types.UID(rec.HolderUID)]++
		if by := published[key]; len(by) != 1 || by[0] != owner || fences[key+"/"+owner] != rec.Fence {
			out = append(out, fmt.Sprintf("shard %s/%s held by %s with fence %d is published to %v", set.Name, key, owner, rec.Fence, by))
		}
	}
	lo, hi := len(set.ShardKeys()), 0
	for _, n := range eligible {
		lo, hi = min(lo, n), max(hi, n)
	}
	if len(out) == 0 && hi-lo > 1 {
		out = append(out, fmt.Sprintf("the shards of set %s are not balanced: %d to %d per eligible pod", set.Name, lo, hi))
	}
	return out
}

// leftOver is what remains of the shards a set no longer has, or of a set
// that is gone: their Leases, and their publications to pods.
func leftOver(name string, set *fencingv1alpha1.FencedShardSet, pods []corev1.Pod, leases []coordinationv1.Lease) []string {
	has := func(key string) bool { return set != nil && set.HasShard(key) }
	var out []string
	for i := range leases {
		l := &leases[i]
		if key := l.Labels[record.LabelShard]; l.Labels[record.LabelShardSet] == name && !has(key) {
			out = append(out, fmt.Sprintf("the Lease %s of shard %s/%s, which the set does not have, is left", l.Name, name, key))
		}
	}
	for i := range pods {
		if setOf(&pods[i]) != name {
			continue
		}
		owned, _ := record.ParseShards(pods[i].Annotations[record.AnnotationShards])
		for key := range owned {
			if !has(key) {
				out = append(out, fmt.Sprintf("pod %s is published shard %s/%s, which the set does not have", pods[i].Name, name, key))
			}
		}
	}
	return out
}
