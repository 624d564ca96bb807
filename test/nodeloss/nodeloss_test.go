package nodeloss_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.ControlPlane))
	}
	testenv.Main(m, &env)
}

// TestLostNodeFailsOver: the holder's kubelet stops heartbeating. The node
// lifecycle controller of kube-controller-manager marks the node lost after
// its grace period (Ready Unknown, the unreachable taint) while the pod's
// containers still read ready; the operator ends the grant at once and, with
// takeover Safe, grants a pod on another node one lease duration later. The
// whole failover fits in the grace period plus one lease duration (the
// eviction of the pod, five minutes later, plays no part).
func TestLostNodeFailsOver(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	const grace, lease = 12 * time.Second, 5 * time.Second

	kcm, err := env.StartControllerManager(t.TempDir(), "--controllers=node-lifecycle-controller",
		"--node-monitor-period=1s", "--node-monitor-grace-period="+grace.String())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if out := kcm.Stop(); t.Failed() {
			t.Logf("kube-controller-manager output:\n%s", out)
		}
	})
	kubeletA, stopA := context.WithCancel(ctx)
	g.Expect(testenv.Kubelet(kubeletA, env.Client, "node-a", time.Second)).To(Succeed())
	g.Expect(testenv.Kubelet(ctx, env.Client, "node-b", time.Second)).To(Succeed())

	ns, err := testenv.Namespace(ctx, env.Client, "nodeloss")
	g.Expect(err).NotTo(HaveOccurred())
	checker, err := testenv.WatchHolders(ctx, env.Config, ns)
	g.Expect(err).NotTo(HaveOccurred())
	m, err := testenv.StartManager(ctx, env.Config, testenv.ManagerOptions{Namespace: ns})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })

	labels := map[string]string{"app": "singleton"}
	// The pods first, both ready, then the FencedLease: a, ready longest,
	// is the first holder (created after the FencedLease, whichever pod
	// became ready first could be granted before the other existed).
	for name, node := range map[string]string{"a": "node-a", "b": "node-b"} {
		pod, err := testenv.CreatePod(ctx, env.Client, testenv.Pod{Namespace: ns, Name: name, Labels: labels, Node: node})
		g.Expect(err).NotTo(HaveOccurred())
		readyFor := time.Minute
		if name == "a" {
			readyFor = time.Hour
		}
		g.Expect(testenv.SetReady(ctx, env.Client, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "db", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(lease / time.Second)
	}))).To(Succeed())
	holder := func() (string, int64) {
		fl := &fencingv1alpha1.FencedLease{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "db"}, fl); err != nil || fl.Status.Holder == nil {
			return "", 0
		}
		return fl.Status.Holder.PodName, fl.Status.Fence
	}
	g.Eventually(func() string { h, _ := holder(); return h }).WithTimeout(30 * time.Second).Should(Equal("a"))
	_, first := holder()

	stopped := time.Now()
	stopA()
	var lost time.Time
	g.Eventually(func() bool {
		n := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: "node-a"}, n)).To(Succeed())
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionUnknown {
				lost = time.Now()
				return true
			}
		}
		return false
	}).WithTimeout(grace+30*time.Second).WithPolling(100*time.Millisecond).Should(BeTrue(), "the node lifecycle controller marks node-a lost")
	// The pod on the lost node still reads ContainersReady=True.
	a := &corev1.Pod{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, a)).To(Succeed())
	g.Expect(containersReady(a)).To(BeTrue())

	g.Eventually(func() int64 { h, n := holder(); return map[bool]int64{true: n}[h == "b"] }).
		WithTimeout(lease + 30*time.Second).WithPolling(100 * time.Millisecond).Should(BeNumerically(">", first))
	failover := time.Since(stopped)
	t.Logf("node-a stopped heartbeating; marked lost after %s; pod b granted %s after the last heartbeat (grace %s + lease %s)",
		lost.Sub(stopped).Round(100*time.Millisecond), failover.Round(100*time.Millisecond), grace, lease)
	// Safe takeover: the grant to b waited a lease duration after the loss.
	g.Expect(failover).To(BeNumerically(">=", lease))

	var events eventsv1.EventList
	g.Expect(env.Client.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	found := false
	for _, e := range events.Items {
		found = found || (e.Reason == fencingv1alpha1.EventLost && strings.Contains(e.Note, "node node-a"))
	}
	g.Expect(found).To(BeTrue(), "a Lost event names the lost node")
	g.Expect(checker.Violations()).To(BeEmpty())
	g.Expect(kcm.Exited()).To(BeFalse(), "kube-controller-manager is still running")
}

func containersReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
