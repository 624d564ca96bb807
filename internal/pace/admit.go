package pace

import (
	"fmt"
	"math"
	"time"
)

const (
	// Headroom is the share of the workers' time that renewals at their
	// longest interval may take while first grants are admitted. Between
	// it and Full, the operator renews what it holds and grants nothing
	// new: the margin that absorbs an API server that slows down for a
	// while, a burst of takeovers, or the writes of the first grants
	// themselves, without a held grant expiring.
	Headroom = 0.65
	// lateMargin is the lateness, as a fraction of the slack, of the
	// latest renewal of about the last window above which no first grant
	// is admitted: a renewal that ran a quarter into its slack says the
	// margin is being used.
	lateMargin = 0.25
	// cooldown is how long no first grant is admitted after a held grant
	// expired unrenewed. The takeovers that follow are the writes of as
	// many grants; first grants would compete with them, and with the
	// renewals of the grants still held, while the cause is still there.
	cooldown = 2 * window
	// debounce is how long admission stays closed once closed for a share
	// or a lateness, so that a measure hovering at its limit does not open
	// and close it on every reconcile.
	debounce = time.Second
	// maxRate and minRate bound the admission rate, in first grants per
	// second. Each time admission closes the rate halves; while it is open
	// it grows by rateGrowth per second: the operator approaches what it
	// can hold in ever smaller steps instead of overshooting by a window's
	// worth of first grants every time the measures let it.
	maxRate, minRate, rateGrowth = 100.0, 1.0, 1.0
)

// admission is the budget of first grants: a token bucket whose rate halves
// each time admission closes and grows back while it is open.
type admission struct {
	rate, tokens float64
	// peak is the lateness of the latest renewals, as a fraction of the
	// slack: the highest seen, decayed over window.
	peak float64
	// closedFor counts down while admission is held closed; why says why.
	closedFor time.Duration
	why       string
	// turn is when the next FencedLease refused for want of budget is told
	// to look again (Retry); turns are the turns given, by FencedLease,
	// until they come (swept is when they were last swept).
	turn  time.Time
	turns map[string]time.Time
	swept time.Time
}

func newAdmission() admission {
	return admission{rate: maxRate, tokens: maxRate, turns: map[string]time.Time{}}
}

// advance moves the budget on by dt.
func (a *admission) advance(dt time.Duration) {
	a.peak *= math.Exp(-dt.Seconds() / window.Seconds())
	a.closedFor = max(a.closedFor-dt, 0)
	if a.closedFor == 0 && a.why == "" {
		a.rate = min(a.rate+rateGrowth*dt.Seconds(), maxRate)
	}
	a.tokens = min(a.tokens+a.rate*dt.Seconds(), max(a.rate, 1))
}

// late records a renewal's lateness, as a fraction of its slack.
func (a *admission) late(f float64) { a.peak = max(a.peak, f) }

// close holds admission closed for at least d, halving the rate if it was
// open. The reason that holds it closed longest is the one given.
func (a *admission) close(d time.Duration, why string) {
	if a.why == "" {
		a.rate = max(a.rate/2, minRate)
	}
	if d >= a.closedFor {
		a.why = why
	}
	a.closedFor = max(a.closedFor, d)
}

// Expired records that a grant the operator renews expired unrenewed at now:
// the worst lateness there is. No first grant is admitted for cooldown, the
// admission rate halves, and the lateness counts it as a renewal a whole
// slack late.
func (p *Pace) Expired(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(now)
	p.late += lateWeight * (1 - p.late)
	a := &p.admission
	a.late(1)
	if a.why != "" {
		// Closed already: halve all the same, once.
		a.rate = max(a.rate/2, minRate)
	}
	a.close(cooldown, "a held grant expired unrenewed")
}

// Admits tells whether a FencedLease that never held a grant may go ahead
// towards one now, and if not, why. It takes nothing from the budget.
func (p *Pace) Admits(now time.Time) (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admits(now)
}

// Admit is Admits, and takes one first grant from the budget when it may.
func (p *Pace) Admit(now time.Time) (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok, why := p.admits(now)
	if ok {
		p.admission.tokens--
	}
	return ok, why
}

// GiveBack returns to the budget a first grant Admit took that was not
// made (the FencedLease had nothing to grant, or waited for another
// reason).
func (p *Pace) GiveBack(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(now)
	p.admission.tokens = min(p.admission.tokens+1, max(p.admission.rate, 1))
}

// admits is Admits; p.mu must be held.
func (p *Pace) admits(now time.Time) (bool, string) {
	p.advance(now)
	if why := p.closed(); why != "" {
		return false, why
	}
	if p.admission.tokens < 1 {
		return false, fmt.Sprintf("first grants are admitted at %.0f a second", p.admission.rate)
	}
	return true, ""
}

// Retry is how long the FencedLease key, that Admit refused at now, waits
// before it looks again, at most longest. While admission is closed for a
// reason (the renewals need the workers), it waits longest. While only the
// budget is spent, it waits for its turn: each one refused is given the
// token after the ones given to those refused before it, so that n waiting
// FencedLeases come back over the n/rate seconds it takes to admit them, not
// all at once a lease duration later (at a thousand new FencedLeases, most
// of the time to grant them all was spent waiting so, with the machine
// idle). A FencedLease is given one turn: looked at again before it (a pod
// event), it is told the same one. A look that would wait longest anyway
// books no turn: turns booked and never used would push every later one
// back.
func (p *Pace) Retry(key string, now time.Time, longest time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(now)
	a := &p.admission
	if p.closed() != "" {
		return longest
	}
	a.forgetTurnsBefore(now)
	if at, ok := a.turns[key]; ok && at.After(now) {
		return min(at.Sub(now), longest)
	}
	perToken := time.Duration(float64(time.Second) / a.rate)
	at := now
	if a.tokens < 1 {
		at = now.Add(time.Duration((1 - a.tokens) * float64(perToken)))
	}
	if a.turn.After(at) {
		at = a.turn
	}
	if at.Sub(now) >= longest {
		return longest
	}
	a.turn = at.Add(perToken)
	a.turns[key] = at
	return at.Sub(now)
}

// Forget forgets the turn given to the FencedLease key, if any: it is
// gone. Its place in the order is not given back (the turns after it keep
// theirs), only the entry, which would otherwise stay until its time came.
func (p *Pace) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.admission.turns, key)
}

// forgetTurnsBefore forgets the turns that came before now, at most once a
// second: the FencedLeases came back (admitted, refused again, or gone).
func (a *admission) forgetTurnsBefore(now time.Time) {
	if now.Before(a.swept.Add(time.Second)) {
		return
	}
	a.swept = now
	for key, at := range a.turns {
		if !at.After(now) {
			delete(a.turns, key)
		}
	}
}

// Spend takes from the budget a grant that is not a first grant: a takeover
// or a re-grant costs the API server and the workers what a first grant
// does, so while they happen first grants wait for them. The budget may go
// as far into debt as one second of admissions.
func (p *Pace) Spend(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(now)
	p.admission.tokens = max(p.admission.tokens-1, -max(p.admission.rate, 1))
}

// closed says why no first grant may be admitted now, or "" when one may;
// p.mu must be held. The share and the lateness close admission before they
// saturate the operator, so that it stops growing with a margin left.
func (p *Pace) closed() string {
	a := &p.admission
	var why string
	switch {
	case p.saturated() && p.share() > Full:
		why = fmt.Sprintf("renewals at their longest interval take %.0f%% of the workers' time", 100*p.share())
	case p.saturated():
		why = fmt.Sprintf("renewals run %.0f%% into their slack on average", 100*p.late)
	case p.share() > Headroom:
		why = fmt.Sprintf("renewals take %.0f%% of the workers' time, above the %.0f%% that leaves a margin",
			100*p.share(), 100*Headroom)
	case a.peak > lateMargin:
		why = fmt.Sprintf("a renewal ran %.0f%% into its slack", 100*a.peak)
	}
	if why != "" {
		a.close(debounce, why)
	}
	if a.closedFor > 0 {
		return a.why
	}
	a.why = ""
	return ""
}
