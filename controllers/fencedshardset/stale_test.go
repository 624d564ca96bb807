package fencedshardset_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// podWrites lets a test fail or hold a replica's writes of one pod.
type podWrites struct {
	client.Client
	pod     string
	fail    *atomic.Bool
	hold    chan struct{} // when not nil, a write of the shards to pod waits for it to close
	holding chan struct{} // closed when a write is held
	held    atomic.Bool
	last    atomic.Value // the outcome of the held write
}

var errInjected = errors.New("injected: the write of the pod failed")

func (w *podWrites) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	held := false
	if o.GetName() == w.pod {
		if w.fail != nil && w.fail.Load() && strings.Contains(o.GetAnnotations()[record.AnnotationShards], `"0"`) {
			return errInjected
		}
		if w.hold != nil && strings.Contains(o.GetAnnotations()[record.AnnotationShards], `"0"`) && w.held.CompareAndSwap(false, true) {
			held = true
			close(w.holding)
			<-w.hold // paused between its reads and this write
		}
	}
	err := w.Client.Patch(ctx, o, p, opts...)
	if held {
		// Only the held write's outcome: the replica's other writes of the
		// pod (of another set's reconcile) may land meanwhile.
		w.last.Store(fmt.Sprint(err))
	}
	return err
}

// A grant committed to pod p whose publication never reaches p (the
// operator's writes of the shard to p fail); a
// paused replica that read p and the Lease then is about to publish it;
// the shard moves on to q without any write of p (another set starts to
// select p, which makes it no set's candidate). When
// the paused replica resumes, its publication to p must fail: the operator
// marked p, the shard's previous holder, before it published the shard
// to q. The fixture's history checker fails the test if p and q are ever
// both published as the shard's owner.
func TestPausedReplicaCannotPublishAMovedShard(t *testing.T) {
	failP := &atomic.Bool{}
	failP.Store(true)
	f := newFixture(t, func(c client.Client) client.Client { return &podWrites{Client: c, pod: "p", fail: failP} })
	paused := &podWrites{pod: "p", hold: make(chan struct{}), holding: make(chan struct{})}
	m, err := testenv.StartManager(f.ctx, env.Config, testenv.ManagerOptions{Namespace: f.ns, Options: setup.Options{
		WrapClient: func(c client.Client) client.Client { paused.Client = c; return paused },
	}})
	f.g.Expect(err).NotTo(HaveOccurred())
	var release sync.Once
	resume := func() { release.Do(func() { close(paused.hold) }) }
	t.Cleanup(func() { resume(); m.Crash(); m.Wait() })

	p, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: "p", Labels: map[string]string{"app": "sharded", "tier": "p"}})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, p, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	f.shardSet("work", func(s *fencingv1alpha1.FencedShardSet) { s.Spec.Shards = 1 })

	// The paused replica read p and the committed grant, and holds its write.
	f.g.Eventually(paused.holding).WithTimeout(timeout).Should(BeClosed())
	f.readyPod("q")
	other := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "other"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "p"}}, Shards: 1}}
	f.g.Expect(f.c.Create(f.ctx, other)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		byPod, _ := f.owners(g, "work")
		g.Expect(byPod).To(HaveKey("q"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// The paused replica resumes: its write of p must not land.
	resume()
	f.g.Eventually(func() any { return paused.last.Load() }).WithTimeout(timeout).ShouldNot(BeNil())
	t.Logf("the paused replica's write of p: %v", paused.last.Load())
	f.g.Expect(paused.last.Load()).To(ContainSubstring("the object has been modified"), "the paused replica's stale publication was not refused")
	// The history has had the time to show it, had it landed.
	f.g.Consistently(f.checker.Violations).WithTimeout(time.Second).Should(BeEmpty())
	f.g.Consistently(func(g Gomega) {
		pod := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "p"}, pod)).To(Succeed())
		g.Expect(pod.Annotations[record.AnnotationShards]).NotTo(ContainSubstring(`"0"`))
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())
}
