package pace

import (
	"math"
	"sync"
	"time"
)

const (
	// Target is the share of the workers' time that renewals may take
	// before their intervals are stretched: the rest is left for first
	// grants, takeovers and publications.
	Target = 0.5
	// Full is the share of the workers' time above which an operator whose
	// renewals are stretched as far as they go is saturated.
	Full = 0.8
	// window is the time constant over which the share is measured.
	window = 10 * time.Second
	// MeasureTime is how long a process measures its load, from its first
	// reconcile, before its measure is believed (Measured): two windows.
	MeasureTime = 2 * window
	// gain is how fast the stretch follows the share: per second, gain
	// times the share's distance from Target. At a share of 1 the stretch
	// goes from none to full in 10 s; at a quarter it relaxes in 20 s.
	gain = 0.2
	// lateWeight is the weight of one renewal in the running lateness.
	lateWeight = 0.1
	// lateLimit is the running lateness, as a fraction of the slack, above
	// which renewals count as late whatever their share.
	lateLimit = 0.1
	// ReportInterval is how often, at most, a FencedLease's status records
	// a renewal that changes nothing else while renewals are stretched,
	// whatever the operator is configured to record otherwise. A
	// custom resource's status write costs the API server about five times
	// a Lease write, and recording every renewal halved what one operator
	// could hold; the Lease carries the renewals, as node Leases carry a
	// kubelet's heartbeats while it reports node status every 5 minutes.
	ReportInterval = 5 * time.Minute
)

// Pace is one operator's renewal pace. It is safe for concurrent use.
type Pace struct {
	workers float64

	mu sync.Mutex
	// busy is the renewals' worker time, decayed over window.
	busy float64
	at   time.Time
	// stretch is 0 (renew every renew interval, as the spec asks) to 1
	// (renew as late as the slack allows).
	stretch float64
	// late is the running lateness of renewals, as a fraction of the slack.
	late float64
	// since is when the first reconcile was recorded.
	since time.Time
	// admission is the budget of first grants (admit.go).
	admission admission
}

// New returns the pace of an operator with the given number of workers.
func New(workers int) *Pace {
	return &Pace{workers: float64(max(workers, 1)), admission: newAdmission()}
}

// Worked records a reconcile that took d and ended at now; renewal tells
// whether it kept a held grant alive (a renewal, or the look that finds
// one not due yet). Every reconcile moves the stretch towards where the
// share asks for it.
func (p *Pace) Worked(now time.Time, d time.Duration, renewal bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(now)
	if p.since.IsZero() {
		p.since = now
	}
	if renewal && d > 0 {
		p.busy += d.Seconds()
	}
}

// advance brings the measures to now: the share decays, the stretch moves
// towards where the share asks for it, and the admission budget refills. A
// time before the last one seen changes nothing. p.mu must be held.
func (p *Pace) advance(now time.Time) {
	if p.at.IsZero() {
		p.at = now
		return
	}
	dt := now.Sub(p.at)
	if dt <= 0 {
		return
	}
	p.at = now
	p.busy *= math.Exp(-dt.Seconds() / window.Seconds())
	p.stretch = min(max(p.stretch+gain*(p.share()-Target)*dt.Seconds(), 0), 1)
	p.admission.advance(dt)
}

// share is the renewals' share of the workers' time; p.mu must be held.
func (p *Pace) share() float64 {
	return p.busy / (window.Seconds() * p.workers)
}

// Late records a renewal made at now, late after it fell due, for a grant
// with the given slack (how late the renewal could run before the grant
// expired: its lease duration less the renew interval it was due at).
func (p *Pace) Late(now time.Time, late, slack time.Duration) {
	if slack <= 0 {
		return
	}
	f := max(float64(late)/float64(slack), 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(now)
	p.late += lateWeight * (f - p.late)
	p.admission.late(f)
	if f > lateMargin {
		// Renewals run into their slack: the workers or the API server
		// cannot keep up with the renewals as they are spaced now. Waiting
		// for the share to build up, over its window, is what a process
		// that starts under thousands of grants cannot afford: their first
		// renewals all fall due within one renew interval.
		p.stretch = 1
	}
}

// Interval is the renew interval to use for a grant whose spec asks for
// renew and lasts lease.
func (p *Pace) Interval(renew, lease time.Duration) time.Duration {
	p.mu.Lock()
	s := p.stretch
	p.mu.Unlock()
	return Stretched(renew, lease, s)
}

// Stretched is renew stretched by s (0 to 1) towards lease - renew, which
// leaves at least one renew interval between a renewal falling due and the
// grant's expiry. A renew interval of half the lease or more is never
// stretched.
func Stretched(renew, lease time.Duration, s float64) time.Duration {
	longest := lease - renew
	if longest <= renew || s <= 0 {
		return renew
	}
	return renew + time.Duration(min(s, 1)*float64(longest-renew))
}

// ReportsRenewal tells whether a renewal at renewed that changes nothing
// else is recorded in a status that last recorded one at reported: once
// every passed since then, and while renewals are stretched (stretch above
// 0) once ReportInterval passed, if that is longer. every 0 records every
// renewal while they are not stretched.
func ReportsRenewal(reported, renewed time.Time, stretch float64, every time.Duration) bool {
	if stretch > 0 {
		every = max(every, ReportInterval)
	}
	return reported.IsZero() || renewed.Sub(reported) >= every
}

// Stretch is how far renew intervals are stretched now, from 0 to 1.
func (p *Pace) Stretch() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stretch
}

// Measured tells whether the pace has measured the load for long enough
// (two windows since the first reconcile) for Saturated to be believed: a
// FencedLease that a previous process left waiting for capacity waits until
// then, so that a restarted operator does not grant thousands of them in
// the seconds before its measure of the renewals' share has built up.
func (p *Pace) Measured(now time.Time) bool {
	return p.UntilMeasured(now) == 0
}

// UntilMeasured is how long from now until Measured: the whole of
// MeasureTime before the first reconcile is recorded.
func (p *Pace) UntilMeasured(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.since.IsZero() {
		return MeasureTime
	}
	return max(MeasureTime-now.Sub(p.since), 0)
}

// Status is what the pace is, for metrics and logs.
type Status struct {
	// Share is the renewals' share of the workers' time.
	Share float64
	// Stretch is how far renew intervals are stretched, from 0 to 1.
	Stretch float64
	// Late is the running lateness of renewals, as a fraction of the slack.
	Late float64
	// Saturated: see Saturated.
	Saturated bool
	// Admitting tells whether first grants were admitted when last asked
	// (Admits); Why says why not.
	Admitting bool
	Why       string
	// Rate is the admission rate, in first grants per second.
	Rate float64
	// Peak is the lateness of the latest renewals, as a fraction of their
	// slack.
	Peak float64
}

// Status returns the pace now.
func (p *Pace) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.admission
	return Status{Share: p.share(), Stretch: p.stretch, Late: p.late, Saturated: p.saturated(),
		Admitting: a.why == "", Why: a.why, Rate: a.rate, Peak: a.peak}
}

// Saturated tells whether the operator holds as many grants as it can
// renew: renewals are stretched as far as they go, and still take more than
// Full of the workers' time, or run late. A new grant would make renewals
// later still.
func (p *Pace) Saturated() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.saturated()
}

func (p *Pace) saturated() bool {
	return p.stretch >= 1 && (p.share() > Full || p.late > lateLimit)
}
