//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// shardResult is what TestShardScale measures (SCALE_OUT).
type shardResult struct {
	Shards, Pods int
	// ColdStartSeconds: from the set's creation until every shard is owned.
	ColdStartSeconds float64
	// ColdWrites are the API server's writes of the cold start, by verb and
	// resource.
	ColdWrites map[string]float64
	// SteadyWritesPerSecond: every write to the API server over the steady
	// window, per second.
	SteadyWritesPerSecond float64
	// SteadyWrites are the steady window's writes by verb and resource.
	SteadyWrites  map[string]float64
	SteadySeconds float64
	// OperatorRSSMiB is the operator's resident memory after the cold start.
	OperatorRSSMiB float64
	// PodLostSeconds: from a pod's deletion until its shards are owned
	// again (takeover Safe: a lease duration at least).
	PodLostSeconds float64
	LeaseSeconds   int
	// Rolling update of every pod (a new pod started, then the old one
	// deleted, one at a time): the most moves of one shard, the moves in
	// all, the longest a shard was unowned, and how long it took.
	RollingMaxMovesPerShard int
	RollingMoves            int
	RollingLongestUnowned   float64
	RollingSeconds          float64
}

// TestShardScale measures a FencedShardSet of SCALE_SHARDS shards (10,000)
// over SCALE_SHARD_PODS pods (10): the cold start, the steady state, a pod
// lost, and a rolling update of every pod.
func TestShardScale(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, pods, lease := envInt("SCALE_SHARDS", 10000), envInt("SCALE_SHARD_PODS", 10), envInt("SCALE_SHARD_LEASE", 15)
	ns, app := "default", "sharded"
	bin, kubeconfig := buildOperator(t)
	op := startOperator(t, ctx, bin, kubeconfig)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the operator's last lines (running: %v):\n%s", op.running(), tail(op.output(), 40))
		}
	})
	res := shardResult{Shards: n, Pods: pods, LeaseSeconds: lease}
	w := watchShardLeases(ctx, t, ns)

	for i := range pods {
		g.Expect(createPod(ctx, env.Client, ns, fmt.Sprintf("w-%d", i), app, "", time.Now().Add(-time.Hour))).To(Succeed())
	}
	before, err := readAPIRequests(ctx, env.Config, writeVerbs)
	g.Expect(err).NotTo(HaveOccurred())
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Shards: int32(n), LeaseDurationSeconds: int32(lease), Takeover: fencingv1alpha1.TakeoverSafe,
			JoinDelaySeconds: ptr.To[int32](30), MaxMovesPerInterval: ptr.To[int32](0)}}
	t0 := time.Now()
	g.Expect(env.Client.Create(ctx, set)).To(Succeed())
	waitOwned(ctx, g, ns, n, pods, envDuration("SCALE_SHARD_COLD", 10*time.Minute))
	res.ColdStartSeconds = time.Since(t0).Seconds()
	after, err := readAPIRequests(ctx, env.Config, writeVerbs)
	g.Expect(err).NotTo(HaveOccurred())
	res.ColdWrites = map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			res.ColdWrites[k] = d
		}
	}
	res.OperatorRSSMiB = float64(op.rss()) / (1 << 20)
	t.Logf("cold start: %d shards over %d pods owned in %.1fs; writes %v; operator RSS %.0f MiB", n, pods, res.ColdStartSeconds, res.ColdWrites, res.OperatorRSSMiB)

	steady := envDuration("SCALE_STEADY", 20*time.Second)
	a, err := readAPIRequests(ctx, env.Config, writeVerbs)
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(steady)
	b, err := readAPIRequests(ctx, env.Config, writeVerbs)
	g.Expect(err).NotTo(HaveOccurred())
	res.SteadySeconds, res.SteadyWritesPerSecond = steady.Seconds(), (sum(b)-sum(a))/steady.Seconds()
	res.SteadyWrites = map[string]float64{}
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			res.SteadyWrites[k] = d
		}
	}
	t.Logf("steady: %.2f writes/s over %s: %v", res.SteadyWritesPerSecond, steady, res.SteadyWrites)

	t0 = time.Now()
	g.Expect(env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-0"}}, client.GracePeriodSeconds(0))).To(Succeed())
	waitOwned(ctx, g, ns, n, pods-1, 5*time.Minute)
	res.PodLostSeconds = time.Since(t0).Seconds()
	t.Logf("pod lost: its shards owned again in %.1fs (lease %ds)", res.PodLostSeconds, lease)
	g.Expect(createPod(ctx, env.Client, ns, "w-0b", app, "", time.Now().Add(-time.Hour))).To(Succeed())
	waitOwned(ctx, g, ns, n, pods, 3*time.Minute)

	w.reset()
	t0 = time.Now()
	list := &corev1.PodList{}
	g.Expect(env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app": app})).To(Succeed())
	for i, old := range list.Items {
		g.Expect(createPod(ctx, env.Client, ns, fmt.Sprintf("v2-%d", i), app, "", time.Now())).To(Succeed())
		time.Sleep(2 * time.Second)
		g.Expect(env.Client.Delete(ctx, &old, client.GracePeriodSeconds(0))).To(Succeed())
		waitOwned(ctx, g, ns, n, pods, 10*time.Minute)
	}
	res.RollingSeconds = time.Since(t0).Seconds()
	res.RollingMaxMovesPerShard, res.RollingMoves, res.RollingLongestUnowned = w.summary()
	t.Logf("rolling update of %d pods in %.1fs: %d moves, at most %d per shard, longest unowned %.1fs",
		pods, res.RollingSeconds, res.RollingMoves, res.RollingMaxMovesPerShard, res.RollingLongestUnowned)
	testenv.WriteResult(t, "SCALE_OUT", res)
}

// waitOwned waits until the set's status says every shard is owned by one of
// pods eligible pods.
func waitOwned(ctx context.Context, g Gomega, ns string, n, pods int, timeout time.Duration) {
	g.Eventually(func(g Gomega) {
		set := &fencingv1alpha1.FencedShardSet{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "work"}, set)).To(Succeed())
		g.Expect(set.Status.Pods).To(Equal(int32(pods)))
		g.Expect(set.Status.Owned).To(Equal(int32(n)))
		g.Expect(set.Status.Moving).To(BeZero())
	}).WithTimeout(timeout).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// shardLeases follows the shards' Leases: each shard's moves, and how long
// each was without a committed grant.
type shardLeases struct {
	mu      sync.Mutex
	last    map[string]int64
	moves   map[string]int
	lost    map[string]time.Time
	longest time.Duration
}

func watchShardLeases(ctx context.Context, t *testing.T, ns string) *shardLeases {
	w := &shardLeases{last: map[string]int64{}, moves: map[string]int{}, lost: map[string]time.Time{}}
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	err = testenv.Follow(ctx, c, ns, &coordinationv1.LeaseList{}, func() { t.Error("the watch of Leases could not resume") }, func(et watch.EventType, o runtime.Object) {
		l := o.(*coordinationv1.Lease)
		if et == watch.Deleted || l.Labels[record.LabelShardSet] == "" {
			return
		}
		w.observe(l)
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *shardLeases) observe(l *coordinationv1.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec, now := record.ParseLease(l.Annotations), time.Now()
	if !rec.Held() {
		if _, ok := w.lost[l.Name]; !ok {
			w.lost[l.Name] = now
		}
		return
	}
	if since, ok := w.lost[l.Name]; ok {
		w.longest = max(w.longest, now.Sub(since))
		delete(w.lost, l.Name)
	}
	if was, ok := w.last[l.Name]; ok && was != rec.Fence {
		w.moves[l.Name]++
	}
	w.last[l.Name] = rec.Fence
}

func (w *shardLeases) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.moves, w.longest = map[string]int{}, 0
}

func (w *shardLeases) summary() (most, total int, longest float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.moves {
		most, total = max(most, m), total+m
	}
	return most, total, w.longest.Seconds()
}
