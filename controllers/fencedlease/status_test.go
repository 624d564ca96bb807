package fencedlease_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestStatusRecordsRenewalsAtItsInterval: the Lease records every renewal;
// the status records a renewal that changes nothing else at most once per
// StatusRenewalInterval (a status patch costs the API server about five
// times a Lease update), and with an interval of 0 every one. The clock is
// fake and moved past the pace's first 20 s, in which a new process records
// no renewal alone whatever the interval, in steps of a second, so that the
// pace does not see late renewals and stretch them (while stretched, a
// renewal alone is recorded every 5 minutes).
func TestStatusRecordsRenewalsAtItsInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration
	}{
		{"once a minute", time.Minute},
		{"every renewal", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			clock := clocktesting.NewFakePassiveClock(time.Now())
			f.startManager(testenv.ManagerOptions{Options: setup.Options{Clock: clock, StatusRenewalInterval: tc.every}})
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 20 })
			f.readyPod("a", time.Hour)
			_, fence := f.waitHolder("db")
			granted := f.get("db").Status.RenewTime.Time

			f.advanceBy(clock, "db", 40*time.Second, time.Second)
			renewed := f.lease("db").Spec.RenewTime.Time
			f.g.Expect(renewed).To(BeTemporally(">=", granted.Add(25*time.Second)), "the Lease records the renewals")
			st := f.get("db").Status
			f.g.Expect(st.Fence).To(Equal(fence))
			if tc.every > 0 {
				f.g.Expect(st.RenewTime.Time).To(BeTemporally("==", granted), "a renewal alone recorded within the interval")
			} else {
				f.g.Eventually(func() time.Time { return f.get("db").Status.RenewTime.Time }).
					WithTimeout(timeout).WithPolling(poll).Should(BeTemporally(">=", renewed), "every renewal recorded")
			}

			f.advanceBy(clock, "db", 30*time.Second, time.Second)
			f.g.Eventually(func(g Gomega) {
				st := f.get("db").Status
				g.Expect(st.RenewTime.Time).To(BeTemporally(">=", granted.Add(tc.every)), "a renewal recorded once the interval passed")
				g.Expect(st.ExpireTime.Time).To(BeTemporally("==", st.RenewTime.Add(20*time.Second)))
			}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		})
	}
}
