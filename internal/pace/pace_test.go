package pace

import (
	"testing"
	"time"
)

func TestStretchedStaysWithinTheSlack(t *testing.T) {
	for _, tc := range []struct {
		renew, lease time.Duration
		s            float64
		want         time.Duration
	}{
		{5 * time.Second, 15 * time.Second, 0, 5 * time.Second},
		{5 * time.Second, 15 * time.Second, 0.5, 7500 * time.Millisecond},
		{5 * time.Second, 15 * time.Second, 1, 10 * time.Second},
		{5 * time.Second, 15 * time.Second, 3, 10 * time.Second},
		{time.Second, 6 * time.Second, 1, 5 * time.Second},
		// Half the lease or more: never stretched.
		{8 * time.Second, 15 * time.Second, 1, 8 * time.Second},
		{7500 * time.Millisecond, 15 * time.Second, 1, 7500 * time.Millisecond},
	} {
		if got := Stretched(tc.renew, tc.lease, tc.s); got != tc.want {
			t.Errorf("Stretched(%s, %s, %v) = %s, want %s", tc.renew, tc.lease, tc.s, got, tc.want)
		}
	}
}

// run feeds the pace one renewal reconcile of d every period, over total, and
// returns the time.
func run(p *Pace, now time.Time, total, period, d time.Duration) time.Time {
	for end := now.Add(total); now.Before(end); now = now.Add(period) {
		p.Worked(now, d, true)
	}
	return now
}

func TestStretchFollowsTheRenewalsShare(t *testing.T) {
	p := New(2)
	now := time.Unix(1000, 0)
	// Renewals take 40 % of two workers: below the target, no stretch.
	now = run(p, now, time.Minute, 100*time.Millisecond, 80*time.Millisecond)
	if st := p.Status(); st.Stretch != 0 || st.Saturated {
		t.Fatalf("at a share of 0.4: %+v, want no stretch", st)
	}
	if got := p.Interval(5*time.Second, 15*time.Second); got != 5*time.Second {
		t.Fatalf("Interval at no stretch = %s", got)
	}
	// 90 %: stretched fully (gain 0.2 per second at 0.4 over the target, once
	// the share has climbed),
	// and saturated.
	now = run(p, now, 40*time.Second, 100*time.Millisecond, 180*time.Millisecond)
	st := p.Status()
	if st.Stretch != 1 || !st.Saturated || st.Share < 0.85 {
		t.Fatalf("at a share of 0.9: %+v, want full stretch and saturated", st)
	}
	if got := p.Interval(5*time.Second, 15*time.Second); got != 10*time.Second {
		t.Fatalf("Interval at full stretch = %s", got)
	}
	// 60 %: still stretched (above the target) but not saturated.
	now = run(p, now, 30*time.Second, 100*time.Millisecond, 120*time.Millisecond)
	if st := p.Status(); st.Stretch != 1 || st.Saturated {
		t.Fatalf("at a share of 0.6: %+v, want full stretch, not saturated", st)
	}
	// Idle: relaxes back to the spec's interval.
	run(p, now, time.Minute, 100*time.Millisecond, 0)
	if st := p.Status(); st.Stretch != 0 || st.Share > 0.01 {
		t.Fatalf("idle: %+v, want no stretch", st)
	}
}

func TestOtherWorkDoesNotCount(t *testing.T) {
	p := New(1)
	now := time.Unix(1000, 0)
	for i := range 600 {
		p.Worked(now.Add(time.Duration(i)*100*time.Millisecond), 100*time.Millisecond, false)
	}
	if st := p.Status(); st.Share != 0 || st.Stretch != 0 {
		t.Fatalf("grants only: %+v, want nothing counted", st)
	}
}

func TestLateRenewalsSaturateOnlyAtFullStretch(t *testing.T) {
	p := New(4)
	// 20 % into the slack: late, but not far enough to stretch at once.
	for range 50 {
		p.Late(time.Unix(900, 0), 2*time.Second, 10*time.Second)
	}
	if st := p.Status(); st.Late < 0.19 || st.Stretch != 0 || st.Saturated {
		t.Fatalf("late but not stretched: %+v, want late and not saturated", st)
	}
	now := time.Unix(1000, 0)
	now = run(p, now, 15*time.Second, 100*time.Millisecond, 400*time.Millisecond)
	// Share 1 stretches fully; then a share of 0.6 alone would not saturate,
	// but the lateness does.
	run(p, now, 30*time.Second, 100*time.Millisecond, 240*time.Millisecond)
	if st := p.Status(); st.Stretch != 1 || st.Share > Full || !st.Saturated {
		t.Fatalf("late at full stretch: %+v, want saturated", st)
	}
	for range 50 {
		p.Late(now, 0, 10*time.Second)
	}
	if p.Saturated() {
		t.Fatalf("on time again at a share of 0.6: %+v, want not saturated", p.Status())
	}
}

func TestAClockGoingBackChangesNothing(t *testing.T) {
	p := New(1)
	now := time.Unix(1000, 0)
	run(p, now, 20*time.Second, 100*time.Millisecond, 100*time.Millisecond)
	before := p.Status()
	p.Worked(now, 0, false)
	if after := p.Status(); after.Stretch != before.Stretch {
		t.Fatalf("a reconcile reported before the last one moved the stretch: %+v -> %+v", before, after)
	}
}

func TestRenewalsAreReportedEveryTimeUnlessStretched(t *testing.T) {
	at := time.Unix(1000, 0)
	for _, tc := range []struct {
		name              string
		reported, renewed time.Time
		stretch           float64
		every             time.Duration
		want              bool
	}{
		{"unstretched, every 0: every renewal", at, at.Add(5 * time.Second), 0, 0, true},
		{"unstretched: not within every", at, at.Add(59 * time.Second), 0, time.Minute, false},
		{"unstretched: once every passed", at, at.Add(time.Minute), 0, time.Minute, true},
		{"stretched: not within the report interval", at, at.Add(ReportInterval - time.Second), 0.1, 0, false},
		{"stretched: the report interval wins over a shorter every", at, at.Add(ReportInterval - time.Second), 0.1, time.Minute, false},
		{"stretched: a longer every wins over the report interval", at, at.Add(ReportInterval), 1, 2 * ReportInterval, false},
		{"stretched: once the report interval passed", at, at.Add(ReportInterval), 1, time.Minute, true},
		{"stretched: a status that never recorded one", time.Time{}, at, 1, time.Minute, true},
		{"unstretched: a status that never recorded one", time.Time{}, at, 0, time.Hour, true},
	} {
		if got := ReportsRenewal(tc.reported, tc.renewed, tc.stretch, tc.every); got != tc.want {
			t.Errorf("%s: ReportsRenewal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMeasuredAfterTwoWindows(t *testing.T) {
	p := New(2)
	now := time.Unix(1000, 0)
	if p.Measured(now) {
		t.Fatal("measured before any reconcile")
	}
	p.Worked(now, time.Millisecond, false)
	if p.Measured(now.Add(2*window - time.Millisecond)) {
		t.Error("measured before two windows")
	}
	if !p.Measured(now.Add(2 * window)) {
		t.Error("not measured after two windows")
	}
}

func TestARenewalFarIntoItsSlackStretchesAtOnce(t *testing.T) {
	p := New(4)
	now := time.Unix(1000, 0)
	p.Worked(now, 0, false)
	p.Late(now, 2*time.Second, 10*time.Second) // 20 %: within the margin
	if st := p.Status(); st.Stretch != 0 {
		t.Fatalf("a renewal 20%% into its slack stretched: %+v", st)
	}
	p.Late(now, 3*time.Second, 10*time.Second) // 30 %
	if st := p.Status(); st.Stretch != 1 {
		t.Fatalf("a renewal 30%% into its slack: %+v, want full stretch at once", st)
	}
	// Idle afterwards, it relaxes as before.
	run(p, now, time.Minute, 100*time.Millisecond, 0)
	if st := p.Status(); st.Stretch != 0 {
		t.Fatalf("idle for a minute after: %+v, want no stretch", st)
	}
}
