package fencedlease_test

import (
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// quiet waits until the operator whose reconciles begun counts has begun
// none of name for two seconds in a row.
func (f *fixture) quiet(begun *atomic.Int32) {
	f.t.Helper()
	f.g.Eventually(func() bool {
		before := begun.Load()
		time.Sleep(2 * time.Second)
		return begun.Load() == before
	}).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the operator never went quiet")
}

// updateLease writes the Lease of name as mutate changes it, as a
// compare-and-swap, and waits until the operator's cache has the write:
// by then the operator's watch has handed the update to its event
// handlers, which decide whether it starts a reconcile.
func (f *fixture) updateLease(m *testenv.Manager, name string, mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
	f.t.Helper()
	var l *coordinationv1.Lease
	f.g.Eventually(func() error {
		l = f.lease(name)
		mutate(l)
		return f.c.Update(f.ctx, l)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.g.Eventually(func(g Gomega) {
		cached := &coordinationv1.Lease{}
		g.Expect(m.GetCache().Get(f.ctx, client.ObjectKeyFromObject(l), cached)).To(Succeed())
		g.Expect(cached.ResourceVersion).To(Equal(l.ResourceVersion))
	}).WithTimeout(timeout).WithPolling(10 * time.Millisecond).Should(Succeed())
	return l
}

// TestRenewTimeOnlyLeaseUpdateStartsNoReconcile: an update of a held
// grant's Lease that changes only spec.renewTime starts no reconcile when
// the operator renews the grant (renewal Operator): the grant's timing
// schedules the next look. It does start one when the holder renews
// (renewal Holder), since the operator judges such a grant's expiry from
// when it sees the holder's renewals. A change of anything else the
// operator reads, here an annotation, starts one either way.
//
// The lease is 300 s, renewed every 100 s: once the grant is published the
// operator has nothing to do for well over the test's windows, so every
// reconcile begun in them was started by the test's write. The write is a
// plain update of the Lease, as another replica's renewal is; the window
// opens once the operator's cache has it (its event handlers have seen it).
//
// What a broken implementation does: if the Lease watch's predicate
// (leaseChanged) let through an update that changes only renewTime of a
// renewal-Operator grant, the operator's every renewal and every other
// replica's would start a reconcile of its own: the first case sees one
// begin. If it dropped such updates of a renewal-Holder grant too, the
// holder's renewals would be seen only when the grant's timing brings a
// look, and the second case sees none.
func TestRenewTimeOnlyLeaseUpdateStartsNoReconcile(t *testing.T) {
	for _, tc := range []struct {
		renewal    fencingv1alpha1.RenewalMode
		reconciles bool
	}{
		{fencingv1alpha1.RenewalOperator, false},
		{fencingv1alpha1.RenewalHolder, true},
	} {
		t.Run("renewal "+string(tc.renewal), func(t *testing.T) {
			f := newFixture(t)
			var begun atomic.Int32
			wrap := func(c client.Client) client.Client {
				return testenv.Intercept(c, interceptor.Funcs{Get: countBegins("db", &begun)})
			}
			m := f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
			f.readyPod("a", time.Hour)
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
				fl.Spec.LeaseDurationSeconds = 300
				fl.Spec.Renewal = tc.renewal
			})
			_, fence := f.waitHolder("db")
			f.quiet(&begun)

			before := begun.Load()
			renewed := f.updateLease(m, "db", func(l *coordinationv1.Lease) {
				now := metav1.NewMicroTime(time.Now())
				l.Spec.RenewTime = &now
			})
			if tc.reconciles {
				f.g.Eventually(begun.Load).WithTimeout(timeout).WithPolling(poll).Should(BeNumerically(">", before),
					"a holder's renewal starts a reconcile")
			} else {
				f.g.Consistently(begun.Load).WithTimeout(3*time.Second).WithPolling(poll).Should(Equal(before),
					"an update of renewTime alone started a reconcile")
			}
			f.quiet(&begun)

			// An update of another field starts one: the Lease watch is
			// live, and the count sees what it starts.
			before = begun.Load()
			f.updateLease(m, "db", func(l *coordinationv1.Lease) {
				l.Annotations["test.fencedlease.io/note"] = "changed"
			})
			f.g.Eventually(begun.Load).WithTimeout(timeout).WithPolling(poll).Should(BeNumerically(">", before),
				"an update of an annotation starts a reconcile")

			// Neither write took the grant from a.
			pod, now := f.waitHolder("db")
			f.g.Expect(pod).To(Equal("a"))
			f.g.Expect(now).To(Equal(fence))
			f.g.Expect(f.lease("db").Spec.RenewTime.Time).To(BeTemporally(">=", renewed.Spec.RenewTime.Time))
		})
	}
}
