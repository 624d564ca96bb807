package protected_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// dryRunDecisions sums fencedlease_webhook_dry_run_decisions_total over the
// series whose labels include every given label.
func dryRunDecisions(labels map[string]string) float64 {
	return harness.Value(metrics.Registry, "fencedlease_webhook_dry_run_decisions_total", labels)
}

// warningClient is a client as a user that records the API server's warnings.
type warningClient struct {
	client.Client
	mu   sync.Mutex
	list []string
}

func (w *warningClient) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningClient) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

func (f *fixture) userWithWarnings(name string, groups ...string) *warningClient {
	au, err := env.AddUser(envtest.User{Name: name, Groups: append(groups, "system:masters")}, nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	w := &warningClient{}
	cfg := rest.CopyConfig(au.Config())
	cfg.WarningHandlerWithContext = w
	w.Client, err = client.New(cfg, client.Options{Scheme: setup.Scheme()})
	f.g.Expect(err).NotTo(HaveOccurred())
	return w
}

// TestDryRun: a dry-run write (kubectl --dry-run=server, kubectl diff) gets
// the answer the real write gets, word for word, and leaves no trace: the
// object is unchanged, no Event is recorded, and the decision is counted
// only as a dry run.
func TestDryRun(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	n := f.waitHolder("db", "a", 0)
	asA := f.asPod(a)
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1"))).To(Succeed())
	f.g.Expect(asA.Create(f.ctx, f.configMap("dry", "db", fenceOf(n), "v1"))).To(Succeed())
	b := f.readyPod("b", time.Minute)
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)
	asB := f.asPod(b)

	// writeDry writes the ConfigMap as c would, as a dry run.
	writeDry := func(c client.Client, name, fence, value string) error {
		cm := &corev1.ConfigMap{}
		f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, cm)).To(Succeed())
		setFence(cm, fence)
		cm.Data = map[string]string{"value": value}
		return c.Update(f.ctx, cm, client.DryRunAll)
	}
	before, dryBefore := decisions(nil), dryRunDecisions(nil)

	// The stale holder, the standby's copy of the fence, a forged fence and
	// a delete by someone who is not the holder: same denials as the real
	// writes below.
	stale := fmt.Sprintf(`ConfigMap %s/dry: write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, f.ns, n, m)
	f.expectDenied(writeDry(asA, "dry", fenceOf(n), "stale"), stale)
	unknown := fmt.Sprintf(`ConfigMap %s/dry: write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, f.ns, m+1000, m)
	f.expectDenied(writeDry(asA, "dry", fenceOf(m+1000), "forged"), unknown)
	notHolder := fmt.Sprintf(`ConfigMap %s/dry: delete rejected: pod a is not the holder of FencedLease "db" (holder: pod b, fence %d)`, f.ns, m)
	f.expectDenied(asA.Delete(f.ctx, f.configMap("dry", "db", "", ""), client.DryRunAll), notHolder)
	// The holder's write and the break-glass write are admitted, and change
	// nothing.
	f.g.Expect(writeDry(asB, "dry", fenceOf(m), "by b")).To(Succeed())
	bob := f.userWithWarnings("bob")
	f.g.Expect(writeDry(bob, "dry", "", "by bob")).To(Succeed())
	f.g.Expect(bob.take()).To(Equal([]string{fmt.Sprintf("break-glass write to ConfigMap %s/dry without a fence: a dry run: nothing is recorded", f.ns)}))
	value, stored := f.storedCM("dry")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v1", fenceOf(n)}))

	// Counted as dry runs only.
	f.g.Expect(decisions(nil)).To(Equal(before))
	f.g.Expect(dryRunDecisions(nil)).To(Equal(dryBefore + 5))
	f.g.Expect(dryRunDecisions(map[string]string{"resource": "configmaps", "result": "denied", "reason": "stale_fence"})).To(BeNumerically(">=", 1))
	f.g.Expect(dryRunDecisions(map[string]string{"resource": "configmaps", "result": "allowed", "reason": "break_glass"})).To(BeNumerically(">=", 1))

	// The same writes for real: same answers, now counted and recorded.
	f.expectDenied(f.writeCM(asA, "dry", fenceOf(n), "stale"), stale)
	f.g.Expect(f.writeCM(bob, "state", "", "by bob")).To(Succeed())
	f.g.Expect(bob.take()).To(Equal([]string{fmt.Sprintf(`break-glass write to ConfigMap %s/state without a fence: recorded as an Event on FencedLease "db"`, f.ns)}))
	f.g.Expect(decisions(nil)).To(Equal(before + 2))

	// Only the real writes left Events (the recorder sends them in order, so
	// once both are there, a dry run's would be too).
	want := []string{
		fencingv1alpha1.EventStaleWriteRejected + ": " + stale,
		fencingv1alpha1.EventBreakGlass + ": " + fmt.Sprintf("Break-glass UPDATE of ConfigMap %s/state by user bob, without a fence", f.ns),
	}
	f.g.Eventually(func() []string { return f.webhookEvents("db") }).WithTimeout(timeout).Should(ContainElements(want))
	f.g.Expect(f.webhookEvents("db")).To(ConsistOf(want))
}
