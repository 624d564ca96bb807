package pace

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// sim is a deterministic simulation of one operator past its capacity:
// workers that take the highest-priority ready FencedLease first (the
// controller's priority queue: held grants at 10, the rest at 0), grants
// renewed at the pace's interval, FencedLeases waiting for a first grant
// that look again every lease duration, and an API server whose writes take
// write, times slow while the clock is within the slow span. It drives the
// real Pace and counts the grants that expire.
type sim struct {
	workers          int
	renew, lease     time.Duration
	write            time.Duration
	slow             float64
	slowFrom, slowTo time.Duration
	// admit decides a first grant: the pace's admission, or another rule
	// to compare it with.
	admit func(p *Pace, now time.Time) bool
	// regrantFirst re-grants an expired grant in the reconcile that finds
	// it, at the held grants' priority, as before; otherwise the re-grant
	// goes behind the renewals of the grants still held.
	regrantFirst bool
	// restartHeld starts the run as an operator process that starts under
	// that many held grants (the first FencedLeases), the others waiting for
	// capacity: the held ones count as renewed when the initial list first
	// shows them, as the controller's clock counts them, and the waiting
	// ones wait until the pace has measured the load.
	restartHeld int
}

// flState is one simulated FencedLease.
type flState struct {
	held     bool
	expired  bool      // found expired, to be re-granted behind the renewals
	renewed  time.Time // when the last renewal was confirmed
	reported time.Time // when the status last recorded a renewal
	next     time.Time // when its next reconcile is ready
}

// simResult is what a run of the simulation counted.
type simResult struct {
	held, expired, heldAtSlow, admittedInSlow int
	// lastExpiry is when the last grant expired, from the start.
	lastExpiry time.Duration
	// pace is the pace at the end.
	pace Status
}

func (s sim) writeAt(t time.Duration) time.Duration {
	if t >= s.slowFrom && t < s.slowTo {
		return time.Duration(float64(s.write) * s.slow)
	}
	return s.write
}

// run simulates n FencedLeases, all created at once, for total.
func (s sim) run(n int, total time.Duration) simResult {
	start := time.Unix(10000, 0)
	p := New(s.workers)
	fls := make([]flState, n)
	for i := range fls {
		// The initial list is spread over the first second.
		fls[i].next = start.Add(time.Duration(i) * time.Second / time.Duration(n))
		if i < s.restartHeld {
			// The status recorded a renewal a minute ago.
			fls[i].held, fls[i].renewed, fls[i].reported = true, fls[i].next, start.Add(-time.Minute)
			// The first renewal of a grant the process did not write is
			// spread between a quarter and all of the interval, as the
			// controller spreads it (by a hash of the FencedLease there).
			spread := 0.25 + 0.75*math.Mod(float64(i)*0.6180339887, 1)
			fls[i].next = fls[i].renewed.Add(time.Duration(spread * float64(s.renew)))
		}
	}
	free := make([]time.Time, s.workers)
	for i := range free {
		free[i] = start
	}
	var res simResult
	end := start.Add(total)
	for {
		w := 0
		for i := range free {
			if free[i].Before(free[w]) {
				w = i
			}
		}
		now := free[w]
		if !now.Before(end) {
			break
		}
		pick := -1
		for i := range fls {
			f := &fls[i]
			if f.next.After(now) {
				continue
			}
			high, pickHigh := f.held && !f.expired, pick >= 0 && fls[pick].held && !fls[pick].expired
			if pick < 0 || high && !pickHigh || high == pickHigh && f.next.Before(fls[pick].next) {
				pick = i
			}
		}
		if pick < 0 {
			// Nothing ready: the worker waits for the next one.
			soonest := end
			for i := range fls {
				if fls[i].next.Before(soonest) {
					soonest = fls[i].next
				}
			}
			free[w] = soonest
			continue
		}
		elapsed := now.Sub(start)
		slowNow := elapsed >= s.slowFrom && elapsed < s.slowTo
		f := &fls[pick]
		write := s.writeAt(elapsed)
		switch {
		case f.held && !f.expired && !s.regrantFirst && now.Sub(f.renewed) > s.lease:
			// Found expired: re-granted behind the renewals.
			res.expired++
			res.lastExpiry = elapsed
			p.Expired(now)
			f.expired = true
			free[w] = now.Add(100 * time.Microsecond)
			continue
		case f.expired || f.held && now.Sub(f.renewed) > s.lease:
			// Re-granted (a pending grant, its commit, the old holder's
			// mark, the new status, the publication).
			if !f.expired {
				res.expired++
				res.lastExpiry = elapsed
				p.Expired(now)
			}
			p.Spend(now)
			d := 5 * write
			f.expired, f.renewed, f.reported = false, now.Add(d), now.Add(d)
			p.Worked(now.Add(d), d, false)
			free[w] = now.Add(d)
		case f.held:
			interval := p.Interval(s.renew, s.lease)
			p.Late(now, now.Sub(f.renewed)-interval, s.lease-interval)
			d := write
			stretch := p.Stretch()
			if !p.Measured(now) {
				stretch = 1
			}
			// Every renewal recorded while unstretched
			// (--status-renewal-interval=0): the most status writes
			// the operator can be configured for.
			if ReportsRenewal(f.reported, now, stretch, 0) {
				// The status records the renewal too.
				d, f.reported = 2*write, now
			}
			f.renewed = now.Add(d)
			p.Worked(now.Add(d), d, true)
			free[w] = now.Add(d)
		case (s.restartHeld == 0 || p.Measured(now)) && s.admit(p, now):
			// A first grant: the finalizer, the Lease, the grant and its
			// commit, the status, the publication.
			if slowNow {
				res.admittedInSlow++
			}
			d := 6 * write
			f.held, f.renewed, f.reported = true, now.Add(d), now.Add(d)
			p.Worked(now.Add(d), d, false)
			free[w] = now.Add(d)
		default:
			// Waits; the look reads the cache only.
			f.next = now.Add(s.lease)
			free[w] = now.Add(100 * time.Microsecond)
			continue
		}
		f.next = f.renewed.Add(p.Interval(s.renew, s.lease))
		if elapsed < s.slowFrom {
			res.heldAtSlow = countHeld(fls)
		}
	}
	res.held, res.pace = countHeld(fls), p.Status()
	return res
}

func countHeld(fls []flState) int {
	n := 0
	for _, f := range fls {
		if f.held {
			n++
		}
	}
	return n
}

// admitWithMargin is the pace's own admission.
func admitWithMargin(p *Pace, now time.Time) bool {
	ok, _ := p.Admit(now)
	return ok
}

// admitUntilSaturated is the admission of before: a first grant whenever
// the operator is not saturated.
func admitUntilSaturated(p *Pace, _ time.Time) bool { return !p.Saturated() }

// overCapacity: two workers, writes of 20 ms, grants of 15 s renewed every
// 5 s (the defaults). At the longest interval (10 s) the workers can renew
// 1,000 grants; 1,500 FencedLeases ask for more. After three minutes the
// API server slows down (set by each test).
func overCapacity() sim {
	return sim{workers: 2, renew: 5 * time.Second, lease: 15 * time.Second, write: 20 * time.Millisecond,
		slowFrom: 3 * time.Minute, admit: admitWithMargin}
}

// TestSimulatedSlowerAPIServerExpiresNothing: past its capacity, the
// operator stops admitting first grants short of its limit, so writes twice
// as slow for 20 s make renewals later and expire none, and nothing new is
// granted while they are slow. Admitting first grants up to saturation (as
// before), the same run expires grants; with the re-grants at the
// renewals' priority too, it churns to the end of the run.
func TestSimulatedSlowerAPIServerExpiresNothing(t *testing.T) {
	s := overCapacity()
	s.slow, s.slowTo = 2, s.slowFrom+20*time.Second
	total := 6 * time.Minute
	res := s.run(1500, total)
	t.Logf("with a margin: %v", res)
	if res.expired != 0 {
		t.Errorf("with a margin: %d grants expired, want none", res.expired)
	}
	if res.heldAtSlow < 500 || res.heldAtSlow >= 1000 {
		t.Errorf("with a margin: %d held when the API server slowed, want at least half of the 1,000 the workers could renew, and fewer", res.heldAtSlow)
	}
	if res.admittedInSlow != 0 {
		t.Errorf("with a margin: %d first grants admitted while the API server was slow", res.admittedInSlow)
	}

	s.admit = admitUntilSaturated
	if m := s.run(1500, total); m.expired == 0 {
		t.Errorf("up to saturation: %v: nothing expired, so the simulation does not test the margin", m)
	}
	s.regrantFirst = true
	if m := s.run(1500, total); m.lastExpiry < total-time.Minute {
		t.Errorf("up to saturation, re-grants first: %v: no churn to the end of the run", m)
	}
}

// TestSimulatedStallIsRecoveredFrom: writes five times slower for 10 s
// expire grants whose renewals fell in them, margin or not; the operator
// re-grants them behind the renewals of the grants still held, and the
// expiries stop within a lease duration of the stall. Re-granting each in
// the reconcile that found it, at the renewals' priority (as before), the
// same stall starts a churn that lasts to the end of the run: each re-grant
// is the writes of a grant, and they make more renewals late.
func TestSimulatedStallIsRecoveredFrom(t *testing.T) {
	s := overCapacity()
	s.slow, s.slowTo = 5, s.slowFrom+10*time.Second
	total := 6 * time.Minute
	res := s.run(1500, total)
	t.Logf("re-grants behind the renewals: %v", res)
	if res.expired == 0 || res.lastExpiry > s.slowTo+s.lease {
		t.Errorf("re-grants behind the renewals: %v, want expiries, over within a lease duration of the stall (by %s)", res, s.slowTo+s.lease)
	}
	if res.held < res.heldAtSlow {
		t.Errorf("re-grants behind the renewals: %d held at the end, %d before the stall: not all re-granted", res.held, res.heldAtSlow)
	}

	s.regrantFirst = true
	before := s.run(1500, total)
	t.Logf("re-grants first: %v", before)
	if before.lastExpiry < total-time.Minute {
		t.Errorf("re-grants first: %v: the churn stopped, so the simulation does not test the recovery", before)
	}
}

// TestSimulatedRestartUnderHeldGrantsExpiresNothing: a process that
// starts under 900 held grants, at 90 % of what its workers can renew at
// the longest interval, has measured nothing: its renewals start at the
// spec's interval, twice what it can make. Their first round is spread
// over the interval, they run into their slack within it, which stretches
// them at once, and the status records none of them until the load is
// measured: no grant expires, and the 600 waiting FencedLeases stay
// waiting.
func TestSimulatedRestartUnderHeldGrantsExpiresNothing(t *testing.T) {
	s := overCapacity()
	s.slowFrom = time.Hour
	s.restartHeld = 900
	res := s.run(1500, 3*time.Minute)
	t.Logf("%v; %+v", res, res.pace)
	if res.expired != 0 {
		t.Errorf("%d grants expired after the restart, want none", res.expired)
	}
	if res.held > 1000 {
		t.Errorf("%d held: the restart admitted first grants past what the workers can renew", res.held)
	}
}

// TestSimulatedQuietOperatorGrantsEverythingAtOnce: well within capacity,
// the margin changes nothing: every FencedLease is granted at once and
// none expires.
func TestSimulatedQuietOperatorGrantsEverythingAtOnce(t *testing.T) {
	s := overCapacity()
	res := s.run(50, 30*time.Second)
	if res.held != 50 || res.expired != 0 {
		t.Fatalf("50 FencedLeases on an operator that can renew 200: %+v, want all held, none expired", res)
	}
}

func (r simResult) String() string {
	return fmt.Sprintf("held %d (%d before the slow span), %d expired (the last at %s), %d admitted while slow",
		r.held, r.heldAtSlow, r.expired, r.lastExpiry, r.admittedInSlow)
}
