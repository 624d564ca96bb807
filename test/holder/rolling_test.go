package holder_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// TestRollingReplacementHandsOverAtOnce replaces the holder pod again and
// again, as a rolling update does, with takeover Safe and a 30 s lease: a new
// pod starts as a standby under fence run, the holder's pod is deleted (and
// so revoked by the operator) and its fence run gets SIGTERM, as from the
// kubelet. fence run stops its child and, once the child has exited,
// releases the revoked grant: the next pod is granted long before the
// revoked grant would expire, with a higher fence, and the old child had
// exited before that grant was written, every time. $HOLDER_ROLLING_N sets
// the number of replacements (3).
func TestRollingReplacementHandsOverAtOnce(t *testing.T) {
	n := 3
	if v, err := strconv.Atoi(os.Getenv("HOLDER_ROLLING_N")); err == nil && v > 0 {
		n = v
	}
	f := newFixture(t)
	bin := buildBinaries(t)
	const lease = 30 * time.Second
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(lease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To[int32](2)
	})
	start := func(name string, readyFor time.Duration) (*corev1.Pod, *holderProc) {
		pod := f.readyPod(name, readyFor)
		return pod, f.startHolder(bin, pod, holderOptions{})
	}
	pod, cur := start("p0", time.Hour)
	first, err := cur.waitStart(f.ctx, 1, 20*time.Second)
	f.g.Expect(err).NotTo(HaveOccurred())
	running := first

	var handovers []time.Duration
	for i := 1; i <= n; i++ {
		nextPod, next := start("p"+strconv.Itoa(i), time.Duration(n+1-i)*time.Minute)
		// The holder's pod goes away as in a rolling update: deleted (a
		// finalizer keeps it visible, as the kubelet's grace period does),
		// and its container told to stop.
		f.g.Expect(f.c.Patch(f.ctx, pod, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["test.fencedlease.io/keep"]}}`)))).To(Succeed())
		f.g.Expect(f.c.Delete(f.ctx, pod)).To(Succeed())
		f.g.Expect(cur.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())

		started, err := next.waitStart(f.ctx, 1, 20*time.Second)
		f.g.Expect(err).NotTo(HaveOccurred(), "replacement %d: the new pod's child starts long before the revoked grant expires", i)
		stopped, ok := cur.stopOf(running.PID)
		f.g.Expect(ok).To(BeTrue(), "replacement %d: the old child logged its stop", i)
		l := f.lease()
		f.g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]).To(Equal(string(nextPod.UID)))
		granted := l.Spec.AcquireTime.Time
		f.g.Expect(granted.After(stopped.At)).To(BeTrue(), "replacement %d: the old child stopped (%s) before the new grant (%s)",
			i, stopped.At.Format(time.StampMicro), granted.Format(time.StampMicro))
		f.g.Expect(started.Token).To(BeNumerically(">", running.Token))
		f.g.Eventually(cur.exited).WithTimeout(10*time.Second).Should(BeClosed(), "fence run exits once its child has")
		handovers = append(handovers, granted.Sub(stopped.At))

		f.g.Expect(f.c.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
		pod, cur, running = nextPod, next, started
	}
	slices.Sort(handovers)
	q := func(p float64) time.Duration {
		return handovers[int(p*float64(len(handovers)-1))].Round(100 * time.Microsecond)
	}
	t.Logf("%d rolling replacements, old child stopped -> next grant written: min %s, p50 %s, p90 %s, max %s (lease %s)", n,
		q(0), q(0.5), q(0.9), q(1), lease)
	// A handover that waited for the revoked grant to expire took a lease
	// duration: the release is what made it short.
	f.g.Expect(handovers[len(handovers)-1]).To(BeNumerically("<", lease/2))
}
