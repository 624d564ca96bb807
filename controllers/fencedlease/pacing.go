package fencedlease

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/pace"
)

// pacer is the one place where the controller meets its pace (internal/pace,
// pure): what it measures of the reconciles, how it stretches renewals,
// when it admits first grants, how often a renewal alone reaches the
// status, and what it reports (design.md, "Renewals under load").
type pacer struct {
	pace *pace.Pace
	// admitting is whether first grants were admitted when last reported.
	admitting atomic.Bool
}

func newPacer(workers int) *pacer {
	p := &pacer{pace: pace.New(workers)}
	p.admitting.Store(true)
	return p
}

// worked records a reconcile that took d and ended at now; renewal tells
// whether it kept a held grant alive.
func (p *pacer) worked(now time.Time, d time.Duration, renewal bool) { p.pace.Worked(now, d, renewal) }

// renewInterval is the interval a grant of that policy is renewed at now.
func (p *pacer) renewInterval(policy holder.Policy) time.Duration {
	return p.pace.Interval(policy.RenewInterval, policy.LeaseDuration)
}

// renewed records a renewal made at clk.Now, how late after it fell due.
func (p *pacer) renewed(clk holder.Clock, interval time.Duration, policy holder.Policy) {
	p.pace.Late(clk.Now, clk.Now.Sub(clk.RenewedAt)-interval, policy.LeaseDuration-interval)
}

// expired records a grant this process renews that expired unrenewed.
func (p *pacer) expired(now time.Time) { p.pace.Expired(now) }

// admit says why the operator admits no first grant now, "" when it
// does (holder's admission gate): it has no margin left to renew more
// grants, and the grants that expired for them would change the fence
// under healthy holders. A waiting FencedLease looks again at its turn in
// the budget (retry), or a lease duration later while admission is closed
// (or at the next event): thousands of them looking every few seconds
// would take the workers' time that the renewals need.
// When it answers "", it takes the first grant from the budget (giveBack
// returns it).
func (p *pacer) admit(now time.Time) string {
	if ok, why := p.pace.Admit(now); !ok {
		return why
	}
	return ""
}

// giveBack returns a first grant admit took that the plan did not make.
func (p *pacer) giveBack(now time.Time) { p.pace.GiveBack(now) }

// spend takes a grant from the first grants' budget: a first grant
// admitted, or a takeover or re-grant, which adds no renewals but makes
// first grants wait while they happen.
func (p *pacer) spend(now time.Time) { p.pace.Spend(now) }

// forget forgets the turn the FencedLease key was given, if any: it is
// gone.
func (p *pacer) forget(key types.NamespacedName) { p.pace.Forget(key.String()) }

// retry is how long the FencedLease key, whose first grant was not admitted
// at now, waits before it looks again: its turn in the budget, or longest
// while admission is closed (pace.Retry).
func (p *pacer) retry(key types.NamespacedName, now time.Time, longest time.Duration) time.Duration {
	return max(p.pace.Retry(key.String(), now, longest), time.Millisecond)
}

// admits tells whether first grants are admitted now.
func (p *pacer) admits(now time.Time) bool {
	ok, _ := p.pace.Admits(now)
	return ok
}

// untilMeasured is how long until the load is measured long enough to be
// believed; 0 once it is.
func (p *pacer) untilMeasured(now time.Time) time.Duration { return p.pace.UntilMeasured(now) }

// recordsRenewal tells whether a renewal at renewed that changes nothing
// else is recorded in a status that last recorded one at reported: once
// every interval (0: every renewal), and while renewals are stretched, or in
// a process's first seconds before it has measured its load, at most once
// every pace.ReportInterval. A process that starts under thousands of held
// grants renews each of them within a lease duration, at the spec's
// interval until its pace stretches; recording each of those renewals too,
// in status patches that cost the API server five times a Lease update, is
// what the grants' renewals could least afford then.
func (p *pacer) recordsRenewal(now, reported, renewed time.Time, interval time.Duration) bool {
	stretch := 1.0
	if p.pace.Measured(now) {
		stretch = p.pace.Stretch()
	}
	return pace.ReportsRenewal(reported, renewed, stretch, interval)
}

// report sets the pace's series and logs each time first grants stop or
// start being admitted, with the reason: the operator's one word on why
// new FencedLeases wait.
func (p *pacer) report(ctx context.Context) {
	st := p.pace.Status()
	renewalShareGauge.Set(st.Share)
	renewalStretchGauge.Set(st.Stretch)
	saturatedGauge.Set(map[bool]float64{true: 0, false: 1}[st.Admitting])
	firstGrantRateGauge.Set(st.Rate)
	renewalLatenessGauge.Set(st.Peak)
	if p.admitting.Swap(st.Admitting) == st.Admitting {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithName("pace")
	if st.Admitting {
		log.Info("Admitting first grants again", "ratePerSecond", st.Rate, "share", st.Share, "stretch", st.Stretch)
		return
	}
	log.Info("First grants wait: "+st.Why, "ratePerSecond", st.Rate, "share", st.Share, "stretch", st.Stretch, "lateness", st.Peak)
}
