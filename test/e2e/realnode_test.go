//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
)

// realNode is the real node of the e2e cluster (a containerd and a
// kubelet: docs/cluster.md); workloadImage runs a shell and fence.
const (
	realNode      = "real-node-1"
	workloadImage = "fencedlease.local/workload:dev"
	keepFinalizer = "e2e.fencedlease.io/keep"
)

// needRealNode fails a test that needs the real node when the cluster has
// none (it needs root, the kubelet and the images).
func needRealNode(t *testing.T) {
	t.Helper()
	if len(cl.RealNodes) == 0 {
		t.Fatalf("no real node in the e2e cluster: %s", realNodeMissing)
	}
}

// realPod creates a pod of the workspace's workload on the real node,
// opted into the pod webhook (the token files), running script in the
// workload image's shell; the finalizer keeps it, and its log, after a
// delete until the test is done with it.
func (w *workspace) realPod(t *testing.T, name, script string) *corev1.Pod {
	t.Helper()
	return w.realPodWith(t, name, script, nil)
}

// realPodWith is realPod with the pod changed by edit, once it is set for
// the real node. Once the test is done the pod goes at once (no grace).
func (w *workspace) realPodWith(t *testing.T, name, script string, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Finalizers: []string{keepFinalizer},
		Labels: map[string]string{"app": app, fencingv1alpha1.LabelInject: "true"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](10),
			Containers: []corev1.Container{{Name: "work", Image: workloadImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", script}}}}}
	g.Expect(cl.PodOnRealNode(&pod.Spec)).To(Succeed())
	if edit != nil {
		edit(pod)
	}
	g.Expect(admin.Create(context.Background(), pod)).To(Succeed())
	t.Cleanup(func() {
		p := &corev1.Pod{}
		if admin.Get(context.Background(), client.ObjectKeyFromObject(pod), p) == nil {
			p.Finalizers = nil
			_ = admin.Update(context.Background(), p)
			_ = admin.Delete(context.Background(), p, client.GracePeriodSeconds(0))
		}
	})
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "pod %s runs on the real node", name)
	return pod
}

// otherOf is whichever of a and b is not the holder h.
func otherOf(h, a, b *corev1.Pod) *corev1.Pod {
	if h.Name == b.Name {
		return a
	}
	return b
}

// log is what the pod's container has written so far.
func podLog(pod *corev1.Pod) string {
	out, _ := cl.ContainerLog(realNode, pod, "work")
	return out
}

// lastSeen is the last "role fence" line of a token-file reader's log.
var lineRE = regexp.MustCompile(`(?m)^seen (\w*) (\d*)$`)

func lastSeen(pod *corev1.Pod) (role string, fence int64) {
	m := lineRE.FindAllStringSubmatch(podLog(pod), -1)
	if len(m) == 0 {
		return "", 0
	}
	last := m[len(m)-1]
	n, _ := strconv.ParseInt(last[2], 10, 64)
	return last[1], n
}

// TestTheKubeletDeliversTheToken: on a real node, the pod webhook's
// downward-API files are what the kubelet writes: the holder's process
// reads role holder and the published fence from /etc/fencedlease, the
// other pod's reads standby and no fence; once the holder is deleted, the
// other's files say holder with a higher fence. The delay from the
// publication to the file is logged (the kubelet's sync; no assertion).
func TestTheKubeletDeliversTheToken(t *testing.T) {
	needRealNode(t)
	g := NewWithT(t)
	w := newWorkspace(t, false)
	script := `while :; do echo "seen $(cat /etc/fencedlease/role) $(cat /etc/fencedlease/fence)"; sleep 0.1; done`
	a := w.realPod(t, "reader-a", script)
	b := w.realPod(t, "reader-b", script)
	h, fence := w.holder()
	other := otherOf(h, a, b)
	published := time.Now()
	g.Eventually(func() []any { r, f := lastSeen(h); return []any{r, f} }).WithTimeout(timeout).WithPolling(poll).
		Should(Equal([]any{"holder", fence}), "the holder's process reads its fence from the file")
	t.Logf("the holder's file said holder %d within %s of the test seeing the publication", fence, time.Since(published).Round(10*time.Millisecond))
	g.Eventually(func() string { r, _ := lastSeen(other); return r }).WithTimeout(timeout).WithPolling(poll).Should(Equal("standby"))
	_, f := lastSeen(other)
	g.Expect(f).To(BeZero(), "a standby's fence file is empty")

	g.Expect(admin.Delete(context.Background(), h)).To(Succeed())
	h2, fence2 := w.holder(h)
	g.Expect(h2.Name).To(Equal(other.Name))
	g.Expect(fence2).To(BeNumerically(">", fence))
	published = time.Now()
	g.Eventually(func() []any { r, f := lastSeen(other); return []any{r, f} }).WithTimeout(timeout).WithPolling(poll).
		Should(Equal([]any{"holder", fence2}))
	t.Logf("the new holder's file said holder %d within %s of the test seeing the publication", fence2, time.Since(published).Round(10*time.Millisecond))
}

// TestFenceRunOnARealKubelet: the holder's container runs its work under
// fence run, which starts it with the fence in FENCE_TOKEN; deleting the
// holder pod, the kubelet's real SIGTERM reaches fence run, which passes
// it on to the work (it traps it and exits 0) and exits 0 within the grace
// period; the other pod's fence run starts its work with a higher fence.
func TestFenceRunOnARealKubelet(t *testing.T) {
	needRealNode(t)
	g := NewWithT(t)
	w := newWorkspace(t, false)
	script := `exec /fence run --grace-period 5s -- /bin/sh -c 'echo "started $FENCE_TOKEN"; trap "echo stopped by TERM; exit 0" TERM; while :; do sleep 0.1; done'`
	a := w.realPod(t, "runner-a", script)
	b := w.realPod(t, "runner-b", script)
	h, fence := w.holder()
	other := otherOf(h, a, b)
	g.Eventually(func() string { return podLog(h) }).WithTimeout(timeout).WithPolling(poll).
		Should(ContainSubstring(fmt.Sprintf("started %d\n", fence)), "fence run starts the work with the fence")
	g.Consistently(func() string { return podLog(other) }).WithTimeout(time.Second).ShouldNot(ContainSubstring("started"),
		"the standby's work does not start")

	deleted := time.Now()
	g.Expect(admin.Delete(context.Background(), h)).To(Succeed())
	// The kubelet removes a stopped container's log with the container:
	// what it wrote is kept from each poll.
	seen := ""
	g.Eventually(func(g Gomega) {
		if l := podLog(h); l != "" {
			seen = l
		}
		p := &corev1.Pod{}
		g.Expect(admin.Get(context.Background(), client.ObjectKeyFromObject(h), p)).To(Succeed())
		g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
		term := p.Status.ContainerStatuses[0].State.Terminated
		g.Expect(term).NotTo(BeNil(), "the container has stopped")
		g.Expect(term.ExitCode).To(BeZero(), "fence run exits 0 on SIGTERM, its work having exited")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	t.Logf("the holder's container stopped %s after its pod was deleted", time.Since(deleted).Round(10*time.Millisecond))
	if l := podLog(h); l != "" {
		seen = l
	}
	g.Expect(seen).To(ContainSubstring("stopped by TERM"), "the work received the kubelet's SIGTERM through fence run")

	_, fence2 := w.holder(h)
	g.Expect(fence2).To(BeNumerically(">", fence))
	g.Eventually(func() string { return podLog(other) }).WithTimeout(timeout).WithPolling(poll).
		Should(ContainSubstring(fmt.Sprintf("started %d\n", fence2)), "the next holder's work starts with its higher fence")
}

// realNodeMissing says why the e2e cluster has no real node, "" when it
// has one.
var realNodeMissing string

// realNodeConfig adds the real node to the e2e cluster when this machine
// can run one: as root, with the kubelet and the images built (make test
// builds them).
func realNodeConfig(cfg *cluster.Config) {
	if os.Geteuid() != 0 {
		realNodeMissing = "a real node needs root"
		return
	}
	images := cluster.ImageTarballs(harness.ImagesDir())
	for _, f := range append([]string{harness.Kubelet()}, images...) {
		if _, err := os.Stat(f); err != nil {
			realNodeMissing = fmt.Sprintf("%v (make kubelet images)", err)
			return
		}
	}
	cfg.RealNodes, cfg.Kubelet, cfg.Images = []string{realNode}, harness.Kubelet(), images
}

// TestReadinessGateOnARealKubelet: with the readiness gate, the kubelet
// computes Ready from the operator's condition: of two running pods on the
// real node, only the holder is Ready, and Ready moves to the other once
// the holder is deleted.
func TestReadinessGateOnARealKubelet(t *testing.T) {
	needRealNode(t)
	g := NewWithT(t)
	w := newWorkspace(t, true)
	a := w.realPod(t, "gated-a", "sleep 3600")
	b := w.realPod(t, "gated-b", "sleep 3600")
	h, _ := w.holder()
	other := otherOf(h, a, b)
	ready := func(p *corev1.Pod) func() bool {
		return func() bool {
			cur := &corev1.Pod{}
			return admin.Get(context.Background(), client.ObjectKeyFromObject(p), cur) == nil && podReady(cur)
		}
	}
	g.Eventually(ready(h)).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the holder is Ready")
	g.Consistently(ready(other)).WithTimeout(2*time.Second).WithPolling(poll).Should(BeFalse(), "the standby runs but is not Ready")
	g.Expect(admin.Delete(context.Background(), h)).To(Succeed())
	h2, _ := w.holder(h)
	g.Expect(h2.Name).To(Equal(other.Name))
	g.Eventually(ready(other)).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the new holder becomes Ready")
}

// TestHolderRenewalOnARealKubelet: with holder renewal, fence run in the
// holder's container renews the grant itself, with the pod's own token,
// and starts its work only after its first renewal; deleting the holder
// pod, the kubelet's SIGTERM reaches fence run, which stops the work and
// releases the grant, so that the other pod's fence run starts its work
// with a higher fence before the 30 s lease could have expired (Safe). The
// time from the delete to the new holder's work starting is logged.
func TestHolderRenewalOnARealKubelet(t *testing.T) {
	needRealNode(t)
	g := NewWithT(t)
	w := newWorkspaceWith(t, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 30
	})
	w.bindRenewer(t)
	script := `exec /fence run --renewal holder --grace-period 2s -- /bin/sh -c 'echo "started $FENCE_TOKEN"; trap "echo stopped by TERM; exit 0" TERM; while :; do sleep 0.1; done'`
	a := w.realPod(t, "renewer-a", script)
	b := w.realPod(t, "renewer-b", script)
	h, fence := w.holder()
	other := otherOf(h, a, b)
	g.Eventually(func() string { return podLog(h) }).WithTimeout(timeout).WithPolling(poll).
		Should(ContainSubstring(fmt.Sprintf("started %d\n", fence)), "fence run starts the work once it has renewed")
	lease := &coordinationv1.Lease{}
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: app}, lease)).To(Succeed())
		g.Expect(lease.Spec.RenewTime).NotTo(BeNil())
		g.Expect(time.Since(lease.Spec.RenewTime.Time)).To(BeNumerically("<", 5*time.Second))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "the holder's fence run renews the Lease")
	renewed := lease.Spec.RenewTime.Time
	g.Eventually(func() time.Time {
		_ = admin.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: app}, lease)
		return lease.Spec.RenewTime.Time
	}).WithTimeout(timeout).WithPolling(poll).Should(BeTemporally(">", renewed), "and keeps renewing it")
	g.Consistently(func() string { return podLog(other) }).WithTimeout(time.Second).ShouldNot(ContainSubstring("started"))

	deleted := time.Now()
	g.Expect(admin.Delete(context.Background(), h)).To(Succeed())
	_, fence2 := w.holder(h)
	g.Expect(fence2).To(BeNumerically(">", fence))
	var started time.Time
	g.Eventually(func() bool {
		lines, _ := cl.ContainerLogLines(realNode, other, "work")
		for _, l := range lines {
			if l.Text == fmt.Sprintf("started %d", fence2) {
				started = l.Time
				return true
			}
		}
		return false
	}).WithTimeout(45*time.Second).WithPolling(poll).Should(BeTrue(), "the next holder's work starts with its higher fence")
	t.Logf("the next holder's work started %s after the holder pod was deleted (a release: under Safe an expiry waits out the 30 s lease)",
		started.Sub(deleted).Round(time.Millisecond))
	g.Expect(started.Sub(deleted)).To(BeNumerically("<", 30*time.Second),
		"the grant was released: under Safe an expiry would wait out the 30 s lease from the last renewal, just before the delete")
}
