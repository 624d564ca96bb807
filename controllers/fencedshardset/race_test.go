package fencedshardset_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// faulty is a replica's client whose writes now and then pause before they
// are sent (a stalled process whose write lands late) or lose their reply
// after the API server applied them.
type faulty struct {
	client.Client
	mu   sync.Mutex
	rng  *rand.Rand
	lost *atomic.Int64
}

var errLostReply = errors.New("reply lost after the write was applied")

func (f *faulty) roll() (pause time.Duration, lose bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.IntN(5) == 0 {
		pause = time.Duration(f.rng.IntN(400)) * time.Millisecond
	}
	if lose = f.rng.IntN(5) == 0; lose {
		f.lost.Add(1)
	}
	return pause, lose
}

func (f *faulty) write(do func() error) error {
	pause, lose := f.roll()
	time.Sleep(pause)
	if err := do(); err != nil || !lose {
		return err
	}
	return errLostReply
}

func (f *faulty) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	return f.write(func() error { return f.Client.Create(ctx, o, opts...) })
}

func (f *faulty) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	return f.write(func() error { return f.Client.Update(ctx, o, opts...) })
}

func (f *faulty) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	return f.write(func() error { return f.Client.Patch(ctx, o, p, opts...) })
}

// Three replicas of the operator reconcile one set at once (no leader
// election), two of them pausing before writes and losing replies, while
// pods are deleted, replaced, and flap between ready and not ready. The
// history of every publication keeps one owner per shard and growing
// fences (the fixture's checker); every committed grant on a shard's Lease
// has a higher fence than the one before; and once the churn stops every
// shard is owned again, balanced, and published as its Lease says.
func TestRacingReplicasKeepOneOwnerPerShard(t *testing.T) {
	f := newFixture(t)
	var lost [2]atomic.Int64
	for i := range 2 {
		rng := rand.New(rand.NewPCG(uint64(i+1), 7))
		m, err := testenv.StartManager(f.ctx, env.Config, testenv.ManagerOptions{Namespace: f.ns, Options: setup.Options{
			WrapClient: func(c client.Client) client.Client { return &faulty{Client: c, rng: rng, lost: &lost[i]} },
		}})
		f.g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { m.Crash(); m.Wait() })
	}
	leases := f.followLeaseFences()
	// Two nodes: a node lost or found again moves shards without a write
	// of the pods themselves.
	nodes := []string{"na-" + f.ns, "nb-" + f.ns}
	podOn := func(name string, node string) {
		pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: workers, Node: node})
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	}
	for i := range 4 {
		podOn(fmt.Sprintf("p%d", i), nodes[i%2])
	}
	f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 24 })

	rng := rand.New(rand.NewPCG(42, 42))
	next := 4
	for range 40 {
		pods := &corev1.PodList{}
		f.g.Expect(f.c.List(f.ctx, pods, client.InNamespace(f.ns))).To(Succeed())
		var live []*corev1.Pod
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp == nil {
				live = append(live, &pods.Items[i])
			}
		}
		p := live[rng.IntN(len(live))]
		switch rng.IntN(5) {
		case 0:
			f.g.Expect(client.IgnoreNotFound(f.c.Delete(f.ctx, p, client.GracePeriodSeconds(0)))).To(Succeed())
			podOn(fmt.Sprintf("p%d", next), nodes[next%2])
			next++
		case 3:
			f.g.Expect(testenv.SetNodeLost(f.ctx, f.c, nodes[rng.IntN(2)])).To(Succeed())
		case 4:
			f.g.Expect(testenv.SetNodeReady(f.ctx, f.c, nodes[rng.IntN(2)])).To(Succeed())
		case 1:
			f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, p)).To(Succeed())
		case 2:
			f.g.Expect(testenv.SetReady(f.ctx, f.c, p, time.Now())).To(Succeed())
		}
		time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond)
	}
	// The churn stops: every node and every pod ready.
	for _, n := range nodes {
		f.g.Expect(testenv.SetNodeReady(f.ctx, f.c, n)).To(Succeed())
	}
	pods := &corev1.PodList{}
	f.g.Expect(f.c.List(f.ctx, pods, client.InNamespace(f.ns))).To(Succeed())
	for i := range pods.Items {
		f.g.Expect(testenv.SetReady(f.ctx, f.c, &pods.Items[i], time.Now().Add(-time.Minute))).To(Succeed())
	}
	f.g.Eventually(func(g Gomega) {
		byPod, fences := f.owners(g, "work")
		g.Expect(fences).To(HaveLen(24))
		g.Expect(counts(byPod)).To(HaveLen(4))
		for _, n := range counts(byPod) {
			g.Expect(n).To(Equal(6))
		}
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	f.g.Expect(leases.violations()).To(BeEmpty())
	t.Logf("replies lost: %d and %d; grants committed: %d", lost[0].Load(), lost[1].Load(), leases.commits())
	f.g.Expect(lost[0].Load()+lost[1].Load()).To(BeNumerically(">", 0), "no reply was lost: the test tested nothing of it")
}

// leaseFences follows the shards' Leases and checks that every committed
// grant of a shard has a higher fence than the one before it.
type leaseFences struct {
	mu    sync.Mutex
	last  map[string]int64
	bad   []string
	count int
}

func (l *leaseFences) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

func (l *leaseFences) commits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

func (f *fixture) followLeaseFences() *leaseFences {
	lf := &leaseFences{last: map[string]int64{}}
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	f.g.Expect(err).NotTo(HaveOccurred())
	gap := func() { lf.mu.Lock(); lf.bad = append(lf.bad, "the watch of Leases could not resume"); lf.mu.Unlock() }
	f.g.Expect(testenv.Follow(f.ctx, c, f.ns, &coordinationv1.LeaseList{}, gap, func(t watch.EventType, o runtime.Object) {
		l := o.(*coordinationv1.Lease)
		rec := record.ParseLease(l.Annotations)
		if t == watch.Deleted || !rec.Held() {
			return
		}
		lf.mu.Lock()
		defer lf.mu.Unlock()
		if was := lf.last[l.Name]; rec.Fence < was {
			lf.bad = append(lf.bad, fmt.Sprintf("Lease %s: committed fence %d after %d", l.Name, rec.Fence, was))
		} else if rec.Fence > was {
			lf.count++
		}
		lf.last[l.Name] = max(lf.last[l.Name], rec.Fence)
	})).To(Succeed())
	return lf
}
