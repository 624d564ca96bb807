package testenv

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/invariant"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// ShardChecker follows the shards published to the pods of a namespace, in
// the order the API server stored them, and checks each shard as the
// HolderChecker checks a FencedLease: at most one pod published as its
// owner at once, its fence never going down, never the fence of another
// pod, never regained once lost; and every publication parses.
type ShardChecker struct {
	mu         sync.Mutex
	pubs       *invariant.Publications
	shards     map[string]map[string]int64 // pod UID → its shards
	violations []string
	highest    map[string]int64 // shard (set/key) → highest fence published
}

// WatchShards starts a ShardChecker on the namespace until ctx ends.
func WatchShards(ctx context.Context, cfg *rest.Config, ns string) (*ShardChecker, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	return WatchShardsWith(ctx, ns, func(ctx context.Context, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error {
		return Follow(ctx, c, ns, list, gap, handle)
	})
}

// WatchShardsWith starts a ShardChecker on the namespace until ctx ends,
// fed by follow (as WatchHoldersWith is).
func WatchShardsWith(ctx context.Context, ns string, follow FollowFunc) (*ShardChecker, error) {
	sc := &ShardChecker{pubs: invariant.NewShardPublications(), shards: map[string]map[string]int64{}, highest: map[string]int64{}}
	gap := func() {
		sc.locked(func() { sc.violations = append(sc.violations, "the watch of pods in "+ns+" could not resume") })
	}
	err := follow(ctx, ns, &corev1.PodList{}, gap, func(t watch.EventType, o runtime.Object) { sc.observe(t, o.(*corev1.Pod)) })
	return sc, err
}

func (sc *ShardChecker) locked(f func()) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	f()
}

// observe checks what the pod is published to own now against the history.
func (sc *ShardChecker) observe(t watch.EventType, pod *corev1.Pod) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	uid, set := string(pod.UID), pod.Labels[record.LabelShardSet]
	was := sc.shards[uid]
	if t == watch.Deleted {
		for key := range was {
			sc.pubs.Gone(uid + "/" + key)
		}
		delete(sc.shards, uid)
		return
	}
	now, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
	if err != nil {
		sc.violations = append(sc.violations, fmt.Sprintf("pod %s: %v", pod.Name, err))
		return
	}
	for key := range was {
		if _, still := now[key]; !still {
			sc.report(sc.pubs.Observe(invariant.Publication{Pod: pod.Name, UID: uid + "/" + key, Lease: set + "/" + key}))
		}
	}
	for key, fence := range now {
		shard := set + "/" + key
		sc.report(sc.pubs.Observe(invariant.Publication{Pod: pod.Name, UID: uid + "/" + key, Lease: shard, Fence: fence, Raw: record.FormatFence(fence)}))
		sc.highest[shard] = max(sc.highest[shard], fence)
	}
	sc.shards[uid] = now
}

func (sc *ShardChecker) report(vs []invariant.Violation) {
	for _, v := range vs {
		sc.violations = append(sc.violations, v.Detail)
	}
}

// Violations returns every broken invariant seen so far.
func (sc *ShardChecker) Violations() []string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return append([]string(nil), sc.violations...)
}

// Highest returns the highest fence published for a shard ("set/key").
func (sc *ShardChecker) Highest(shard string) int64 {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.highest[shard]
}
