//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The pods of TestKubeletDelays: their own downward-API file and readiness
// gate, outside any FencedLease, so that what is timed is the kubelet's
// part alone.
const (
	probeAnnotation = "bench.fencedlease.io/value"
	probeGate       = corev1.PodConditionType("bench.fencedlease.io/ready")
	// quiet is the pause before each timed change.
	quiet = 2 * time.Second
)

// TestKubeletDelays measures, on the real node, the three things of the
// kubelet the product relies on (docs/design.md, "What the kubelet does"):
// from an annotation's change in the API server to the process reading it
// in its downward-API file; from a readiness gate condition's change to
// the pod's Ready; from the pod's deletion to SIGTERM in the process. The
// process writes what it saw to its log, timed by the container runtime.
// KUBELET_DELAY_ROUNDS rounds of each (10 by default); the figures are
// logged as quantiles, never asserted (docs/benchmarks.md): the test fails
// only when something never happens.
func TestKubeletDelays(t *testing.T) {
	needRealNode(t)
	rounds := 10
	if v, err := strconv.Atoi(os.Getenv("KUBELET_DELAY_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	w := newWorkspace(t, false)
	script := `trap 'echo term; sleep 30' TERM
prev=""
while :; do cur=$(cat /etc/bench/value); if [ "$cur" != "$prev" ]; then echo "value $cur"; prev="$cur"; fi; sleep 0.01; done`

	pod := w.probePod(t, "probe", script)
	var file, gate []time.Duration
	// Each change comes alone, as a handoff's does: the kubelet syncs a pod
	// at most about once a second, so back-to-back changes would time its
	// pacing rather than its reaction.
	for i := 1; i <= rounds; i++ {
		time.Sleep(quiet)
		at := w.patchPod(t, pod, fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, probeAnnotation, i))
		seen := w.logLine(t, pod, fmt.Sprintf("value %d", i))
		file = append(file, seen.Sub(at))
	}
	for i := 1; i <= rounds; i++ {
		status := corev1.ConditionTrue
		if i%2 == 0 {
			status = corev1.ConditionFalse
		}
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q}]}}`, probeGate, status)
		time.Sleep(quiet)
		at := time.Now()
		NewWithT(t).Expect(admin.Status().Patch(context.Background(), pod, client.RawPatch(types.StrategicMergePatchType, []byte(patch)))).To(Succeed())
		NewWithT(t).Eventually(func() bool {
			cur := &corev1.Pod{}
			return admin.Get(context.Background(), client.ObjectKeyFromObject(pod), cur) == nil && podReady(cur) == (status == corev1.ConditionTrue)
		}).WithTimeout(timeout).WithPolling(5*time.Millisecond).Should(BeTrue(), "round %d: Ready follows the gate", i)
		gate = append(gate, time.Since(at))
	}

	var term []time.Duration
	for i := range max(rounds/2, 5) {
		p := w.probePod(t, fmt.Sprintf("term-%d", i), script)
		time.Sleep(quiet)
		at := time.Now()
		NewWithT(t).Expect(admin.Delete(context.Background(), p)).To(Succeed())
		term = append(term, w.logLine(t, p, "term").Sub(at))
	}
	t.Logf("kubelet on the real node, %d rounds: annotation to file %s; readiness gate to Ready %s; delete to SIGTERM (%d pods) %s",
		rounds, quantiles(file), quantiles(gate), len(term), quantiles(term))
}

// probePod runs script on the real node with the probe's downward-API file
// (/etc/bench/value) and readiness gate, outside the workspace's
// FencedLease (realPodWith, without its labels).
func (w *workspace) probePod(t *testing.T, name, script string) *corev1.Pod {
	t.Helper()
	pod := w.realPodWith(t, name, script, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "probe"}
		p.Annotations = map[string]string{probeAnnotation: "0"}
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: probeGate}}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "bench", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "value", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + probeAnnotation + "']"}}}}}})
		c := &p.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "bench", MountPath: "/etc/bench"})
	})
	w.logLine(t, pod, "value 0")
	return pod
}

// patchPod merge-patches the pod and returns when the API server had it:
// the middle of the call.
func (w *workspace) patchPod(t *testing.T, pod *corev1.Pod, patch string) time.Time {
	t.Helper()
	before := time.Now()
	NewWithT(t).Expect(admin.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	return before.Add(time.Since(before) / 2)
}

// logLine waits for the first line text in the pod's log and returns when
// the container runtime read it.
func (w *workspace) logLine(t *testing.T, pod *corev1.Pod, text string) time.Time {
	t.Helper()
	var at time.Time
	NewWithT(t).Eventually(func() bool {
		at = firstLine(pod, text)
		return !at.IsZero()
	}).WithTimeout(timeout).WithPolling(5*time.Millisecond).Should(BeTrue(), "pod %s wrote %q", pod.Name, text)
	return at
}

// firstLine is when the pod's container first wrote the line text (as the
// container runtime read it), zero if it has not yet.
func firstLine(pod *corev1.Pod, text string) time.Time {
	lines, _ := cl.ContainerLogLines(realNode, pod, "work")
	for _, l := range lines {
		if l.Text == text {
			return l.Time
		}
	}
	return time.Time{}
}

// quantiles is "p50 … p90 … max …" of ds.
func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond) }
	parts := []string{"min " + s[0].Round(time.Millisecond).String(), "p50 " + q(0.5).String(), "p90 " + q(0.9).String(), "max " + s[len(s)-1].Round(time.Millisecond).String()}
	return strings.Join(parts, ", ")
}
