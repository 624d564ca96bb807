package fencedshardset_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
)

var workers = map[string]string{"app": "sharded"}

// fixture is one test's namespace, with the operator running in it and a
// checker that fails the test if a shard is ever published to two pods at
// once or its fence ever goes down.
type fixture struct {
	t       *testing.T
	g       Gomega
	ctx     context.Context
	ns      string
	c       client.Client
	checker *testenv.ShardChecker
}

func newFixture(t *testing.T, wrap ...func(client.Client) client.Client) *fixture {
	harness.Needs(t, harness.ControlPlane)
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "fss")
	g.Expect(err).NotTo(HaveOccurred())
	checker, err := testenv.WatchShards(ctx, env.Config, ns)
	g.Expect(err).NotTo(HaveOccurred())
	f := &fixture{t: t, g: g, ctx: ctx, ns: ns, c: env.Client, checker: checker}
	t.Cleanup(func() { g.Expect(checker.Violations()).To(BeEmpty(), "invariants broken in namespace %s", ns) })
	opts := testenv.ManagerOptions{Namespace: ns}
	if len(wrap) > 0 {
		opts.WrapClient = wrap[0]
	}
	m, err := testenv.StartManager(ctx, env.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })
	return f
}

func (f *fixture) readyPod(name string) *corev1.Pod {
	f.t.Helper()
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: workers})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	return pod
}

func (f *fixture) shardSet(name string, mutate func(*fencingv1alpha1.FencedShardSet)) *fencingv1alpha1.FencedShardSet {
	f.t.Helper()
	set := &fencingv1alpha1.FencedShardSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: fencingv1alpha1.FencedShardSetSpec{
			Selector: metav1.LabelSelector{MatchLabels: workers}, Shards: 12, LeaseDurationSeconds: 3,
			JoinDelaySeconds: ptr.To[int32](0), Takeover: fencingv1alpha1.TakeoverImmediate,
		},
	}
	if mutate != nil {
		mutate(set)
	}
	f.g.Expect(f.c.Create(f.ctx, set)).To(Succeed())
	return set
}

// owners reads who owns what, from the pods and from the Leases, and
// checks that they agree: every shard a pod lists is held on its Lease by
// that pod with that fence.
func (f *fixture) owners(g Gomega, set string) (byPod map[string]map[string]int64, fences map[string]int64) {
	pods := &corev1.PodList{}
	g.Expect(f.c.List(f.ctx, pods, client.InNamespace(f.ns))).To(Succeed())
	byPod, fences = map[string]map[string]int64{}, map[string]int64{}
	for _, p := range pods.Items {
		shards, err := record.ParseShards(p.Annotations[record.AnnotationShards])
		g.Expect(err).NotTo(HaveOccurred())
		if len(shards) == 0 {
			continue
		}
		byPod[p.Name] = shards
		for key, fence := range shards {
			g.Expect(fences).NotTo(HaveKey(key), "shard %s published to two pods", key)
			fences[key] = fence
			l := &coordinationv1.Lease{}
			g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: record.ShardLeaseName(set, key)}, l)).To(Succeed())
			rec := record.ParseLease(l.Annotations)
			g.Expect(rec.Holds(string(p.UID))).To(BeTrue(), "shard %s listed by pod %s is not held by it on its Lease", key, p.Name)
			g.Expect(rec.Fence).To(Equal(fence))
		}
	}
	return byPod, fences
}

// counts is how many shards each pod owns.
func counts(byPod map[string]map[string]int64) map[string]int {
	out := map[string]int{}
	for p, s := range byPod {
		out[p] = len(s)
	}
	return out
}

func (f *fixture) get(name string) *fencingv1alpha1.FencedShardSet {
	set := &fencingv1alpha1.FencedShardSet{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, set)).To(Succeed())
	return set
}
