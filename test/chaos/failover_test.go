//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/internal/record"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// failoverRounds is how many handoffs TestHAFailover times in each case.
const failoverRounds = 15

// TestHAFailover times failovers on the HA control plane (make chaos HA=1):
// from the write that makes the holder's containers not ready to the new
// holder published (its pod's annotations name it holder with a higher
// fence, as etcd applied them), takeover Immediate, with nothing else going
// on ("quiet") and with the API server that carries the operator's
// connection crashed at the same moment and started again 2 s later
// ("apiserver-restart"): the operator must notice its connection gone,
// reconnect through the balancer to the other API server and list
// everything anew before it can see the cause. The rounds of the two cases
// alternate. It asserts that every handoff happens, to the other pod, with a
// higher fence, and that the holder checker sees no violation; the times are
// logged, never asserted.
func TestHAFailover(t *testing.T) {
	g := NewWithT(t)
	kind, err := controlPlaneKind()
	g.Expect(err).NotTo(HaveOccurred())
	if kind != "ha" {
		t.Fatal("TestHAFailover needs the HA control plane: CHAOS_CONTROL_PLANE=ha (make chaos HA=1)")
	}
	testenv.SetLogger()
	ctx, cancel := context.WithCancel(context.Background())
	cp, err := startControlPlane(ctx, t)
	t.Cleanup(cancel) // before the control plane stops
	g.Expect(err).NotTo(HaveOccurred())
	c, admin := cp.ha, cp.env.Client
	operatorConfig, err := testenv.OperatorConfig(ctx, cp.env)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(testenv.InstallPolicies(ctx, admin, testenv.PolicyFiles()...)).To(Succeed())

	// The operator has a balancer of its own, to tell which API server its
	// connection is on.
	lb, err := c.NewAPIBalancer()
	g.Expect(err).NotTo(HaveOccurred())
	opCfg := rest.CopyConfig(operatorConfig)
	opCfg.Host = "https://" + lb.Addr()
	m, err := testenv.StartManager(ctx, opCfg, testenv.ManagerOptions{Webhooks: &cp.env.WebhookInstallOptions,
		WebhookOptions: setup.WebhookOptions{OperatorUsers: []string{testenv.OperatorUser}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Stop() })
	g.Expect(cp.ready(ctx)).To(Succeed())

	ns, err := testenv.Namespace(ctx, admin, "failover")
	g.Expect(err).NotTo(HaveOccurred())
	checker, err := testenv.WatchHoldersWith(ctx, ns, cp.follow)
	g.Expect(err).NotTo(HaveOccurred())
	pubs := newPublications()
	g.Expect(cp.follow(ctx, ns, &corev1.PodList{}, func() { t.Error("the pod watch lost events") }, pubs.observe)).To(Succeed())
	labels := map[string]string{"failover": "app"}
	g.Expect(admin.Create(ctx, testenv.FencedLease(ns, "app", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	}))).To(Succeed())
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"app-a", "app-b"} {
		pod, err := testenv.CreatePod(ctx, admin, testenv.Pod{Namespace: ns, Name: name, Labels: labels, Node: "failover-node"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(testenv.SetReady(ctx, admin, pod, time.Now())).To(Succeed())
		pods[name] = pod
	}

	times := map[string][]time.Duration{}
	for round := range 2 * failoverRounds {
		restart := round%2 == 1
		holder, fence := pubs.waitHolder(t, 60*time.Second, 0)
		sleep(ctx, time.Second)
		var restarted sync.WaitGroup
		what := "quiet"
		if restart {
			server := busiest(c.APIServerAddr, lb.Backends(), c.APIServers())
			what = fmt.Sprintf("kube-apiserver-%d (the operator's) crashed", server)
			g.Expect(c.StopAPIServer(server, true)).To(Succeed())
			g.Expect(c.CutAPIServer(server)).To(Succeed())
			restarted.Add(1)
			go func() {
				defer restarted.Done()
				sleep(ctx, 2*time.Second)
				if err := c.StartAPIServer(ctx, server); err != nil {
					t.Errorf("start kube-apiserver-%d: %v", server, err)
				}
				_ = c.HealAPIServer(server)
			}()
		}
		start := time.Now()
		g.Expect(testenv.SetContainersNotReady(ctx, admin, pods[holder])).To(Succeed())
		next, nextFence, at := pubs.waitNext(t, 60*time.Second, fence)
		g.Expect(next).NotTo(Equal(holder), "round %d: the lease went to the other pod", round)
		d := at.Sub(start)
		key := map[bool]string{false: "quiet", true: "apiserver-restart"}[restart]
		times[key] = append(times[key], d)
		t.Logf("round %2d (%s): %s (fence %d) -> %s (fence %d) in %s", round, what, holder, fence, next, nextFence, d.Round(time.Millisecond))
		restarted.Wait()
		g.Expect(testenv.SetReady(ctx, admin, pods[holder], time.Now())).To(Succeed())
	}
	for _, key := range []string{"quiet", "apiserver-restart"} {
		t.Logf("failover %-17s %s", key, stats(times[key]))
	}
	g.Expect(checker.Violations()).To(BeEmpty())
}

// busiest is the API server that most connections of the balancer go to.
func busiest(addr func(int) string, conns map[string]int, servers int) int {
	best := 0
	for i := range servers {
		if conns[addr(i)] > conns[addr(best)] {
			best = i
		}
	}
	return best
}

// stats is n, min, median, 90th percentile and max of the durations.
func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond) }
	return fmt.Sprintf("n=%d min=%s median=%s p90=%s max=%s", len(s), s[0].Round(time.Millisecond), at(0.5), at(0.9), s[len(s)-1].Round(time.Millisecond))
}

// publications are the holder publications of a namespace's pods, as the
// pod watch delivered them, with the time each arrived.
type publications struct {
	mu   sync.Mutex
	list []publication
}

type publication struct {
	pod   string
	fence int64
	at    time.Time
}

func newPublications() *publications { return &publications{} }

func (p *publications) observe(t watch.EventType, o runtime.Object) {
	pod := o.(*corev1.Pod)
	if t == watch.Deleted || pod.Annotations[fencingv1alpha1.AnnotationRole] != fencingv1alpha1.RoleHolder {
		return
	}
	fence := record.FenceOf(pod.Annotations[fencingv1alpha1.AnnotationFence])
	if fence == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.list); n > 0 && p.list[n-1].fence >= fence {
		return
	}
	p.list = append(p.list, publication{pod: pod.Name, fence: fence, at: time.Now()})
}

// waitNext waits for the first publication of a fence above fence.
func (p *publications) waitNext(t *testing.T, timeout time.Duration, fence int64) (string, int64, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, pub := range p.list {
			if pub.fence > fence {
				p.mu.Unlock()
				return pub.pod, pub.fence, pub.at
			}
		}
		p.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no holder published with a fence above %d within %s", fence, timeout)
	return "", 0, time.Time{}
}

// waitHolder waits for a publication above fence and returns the latest.
func (p *publications) waitHolder(t *testing.T, timeout time.Duration, fence int64) (string, int64) {
	t.Helper()
	p.waitNext(t, timeout, fence)
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.list[len(p.list)-1]
	return last.pod, last.fence
}
