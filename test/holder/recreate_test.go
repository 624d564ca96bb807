package holder_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestDeletedFencedLeaseKeepsItsSafeWait: the holder a of a FencedLease
// with holder renewal and takeover Safe is cut off from the API server, and
// the FencedLease is deleted; a user creates it again under the same name,
// as soon as the name is free, selecting b alone. a cannot learn anything:
// it stops on its own clock at its deadline. The new FencedLease must not
// grant b before then: deleting a FencedLease ends its grant as any takeover
// does, it does not skip the wait.
func TestDeletedFencedLeaseKeepsItsSafeWait(t *testing.T) {
	bin := buildBinaries(t)
	f := newFixture(t)
	rec := f.recordLease("db")
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(pauseLease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(pauseInterval / time.Second))
	})
	a := f.readyPod("a", time.Hour)
	b, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: "b", ServiceAccount: "default",
		Labels: map[string]string{"app": "singleton", "second": "yes"}})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, b, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	_, err = rec.wait(f.ctx, timeout, "created", func(leaseVersion) bool { return true })
	f.g.Expect(err).NotTo(HaveOccurred())
	proxy := startProxy(t, apiAddr())
	pa := f.startHolder(bin, a, holderOptions{API: proxy.Addr(), Margin: pauseMargin})
	pb := f.startHolder(bin, b, holderOptions{Margin: pauseMargin})

	startA, err := pa.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	grantA, err := rec.grantTo(f.ctx, a.UID, 0, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	_, err = rec.wait(f.ctx, timeout, "renewed by a", func(v leaseVersion) bool {
		return v.Transitions == grantA.Transitions && v.RenewTime.After(startA.At)
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	cut := time.Now()
	proxy.Cut()
	rec.dumpOnFailure(t, cut)
	old := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}
	f.g.Expect(f.c.Delete(f.ctx, old)).To(Succeed())
	again := testenv.FencedLease(f.ns, "db", map[string]string{"second": "yes"}, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = int32(pauseLease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(pauseInterval / time.Second))
	})
	f.g.Eventually(func() error {
		err := f.c.Create(f.ctx, again.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			return err // the old one is still being deleted
		}
		f.g.Expect(err).NotTo(HaveOccurred())
		return nil
	}).WithTimeout(timeout).WithPolling(5 * time.Millisecond).Should(Succeed())
	recreated := time.Now()

	grantB, err := rec.wait(f.ctx, timeout, "granted to b", func(v leaseVersion) bool {
		return v.Holder == b.UID && v.State == fencingv1alpha1.LeaseStateHeld
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	startB, err := pb.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	// Both Leases are recorded under the one name: a's renewals are those
	// that name it.
	var lastRenewal time.Time
	for _, v := range rec.all() {
		if v.Holder == a.UID && v.RenewTime.After(lastRenewal) {
			lastRenewal = v.RenewTime
		}
	}
	deadline := lastRenewal.Add(pauseLease - pauseMargin)
	lastA, _ := pa.lastOf(startA.PID)
	t.Logf("re-created %s after the cut; b granted %s after a's deadline; a's child last worked %s before b's child started",
		recreated.Sub(cut).Round(time.Millisecond), grantB.AcquireTime.Sub(deadline).Round(time.Millisecond),
		startB.At.Sub(lastA.At).Round(time.Millisecond))
	f.g.Expect(grantB.Fence).To(BeNumerically(">", grantA.Fence), "the new FencedLease's fence is higher")
	f.g.Expect(grantB.AcquireTime).To(BeTemporally(">=", deadline), "b granted before a's own validity ended")
	f.g.Expect(lastA.At).To(BeTemporally("<", grantB.AcquireTime), "a's child worked after b was granted")
}
