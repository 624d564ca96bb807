package holder_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Timing of the paused-holder runs: short leases, so that many runs fit in
// minutes. The margin is fence run's --margin (below its cap of a quarter
// of the lease duration).
const (
	pauseLease    = 3 * time.Second
	pauseInterval = time.Second
	pauseMargin   = 500 * time.Millisecond
)

// pauseRun is what one paused-holder run measured. All times are wall-clock
// times of this machine, which every process here shares.
type pauseRun struct {
	// Early: the run meant to resume a within the margin after its deadline,
	// before the operator may grant anyone; otherwise it kept a stopped for
	// one to three lease durations.
	Early bool
	// Offset is when the pause began after the renewal it followed (as the
	// test's watch saw it); Paused is how long it lasted.
	Offset, Paused time.Duration
	// Deadline is a's deadline as the design defines it, computed from what
	// a itself wrote: the latest renewTime (the send time of the renewal)
	// among the versions of a's grant that the API server accepted, plus
	// leaseDuration, minus the margin. a's own deadline is no later: it
	// counts only renewals whose answer reached it.
	Deadline time.Time
	// Granted is b's grant: the Lease's acquireTime, which the operator
	// takes just before it sends the grant write (so no later than the
	// write).
	Granted time.Time
	// Resumed is when the test continued a; Stopped is the stop line of
	// a's work (the child under fence run, or the Go holder's own loop).
	Resumed, Stopped time.Time
	// ValidUntil is when a's validity ended at the latest: its deadline, or
	// the stop line of its work if that came first (a's work stops only once
	// its Session has ended the grant; a grant that a ends itself, say by a
	// release after its work stopped, may be granted on at once).
	ValidUntil time.Time
	// Gap = Granted − ValidUntil: ≥ 0 is invariant 8.
	Gap time.Duration
	// Released: a released its grant (the Lease went to state released).
	Released bool
	// LogGap = Granted − the deadline that a's Session itself reported when
	// it let the grant go: the stop line of a's work, which follows the end
	// of the grant, minus the "deadline X ago" the Session logged (so no
	// earlier than a's own deadline, to the millisecond of its rounding);
	// only when it was the deadline that ended the grant.
	LogGap     time.Duration
	HaveLogGap bool
	// ThawBeats counts beats of a's work from its resumption to its stop:
	// what it did in the instant after it was continued, before fence run's
	// SIGTERM reached it (always 0 for the Go holder, which checks Valid
	// before each beat).
	ThawBeats int
	// Reason is what a's Session gave for ending the grant: "deadline" or
	// "Lease moved".
	Reason string
	// LastRenewal is the send time of a's last renewal accepted before the
	// pause.
	LastRenewal time.Time
	// LateRenewals are renewals of a's grant accepted by the API server
	// whose send time (renewTime) is after a was stopped: sent after it
	// resumed, that is after its deadline.
	LateRenewals []time.Time
}

// Unwarned says that a resumed more than 100ms before the operator could
// end its grant: the operator's expiry comes at least a lease duration after
// the send time of a's last renewal.
func (r pauseRun) Unwarned() bool {
	return r.Resumed.Before(r.LastRenewal.Add(pauseLease - 100*time.Millisecond))
}

// pausedPastDeadline is one run of the paused holder, in its own namespace
// with its own operator:
//
//  1. pods a (ready longest: granted first) and b each run as a process of
//     their own with their pod's bound token: `fence run --renewal holder
//     -- child`, or with goHolder testdata/goholder (a Go program with its
//     own Session); a holds and renews its grant itself;
//  2. after one to three of a's renewals, at a random offset within the
//     renew interval, the test stops a (fence run, then its child's process
//     group) with SIGSTOP;
//  3. it continues a either at a random moment within the margin after
//     a's deadline, before the operator may grant b (early), or after a
//     random time between one and three lease durations (late: b has often
//     been granted by then, but not always, as the operator may take up to
//     about two lease durations to see that a stopped renewing).
//
// Asserted every run: b is granted only after a's validity ended, at its
// deadline or, if earlier, when its work stopped (gap ≥ 0; also against the
// deadline a reported); a's work was really stopped during the
// pause, is stopped once a runs again, and never starts again; the Go
// holder does nothing after its deadline; when a resumed before the
// operator could end its grant (Unwarned), a's deadline ended its work,
// before the grant to b, and b's work started only after a's stopped.
func pausedPastDeadline(t *testing.T, bin binaries, early, goHolder bool) pauseRun {
	f := newFixture(t)
	rec := f.recordLease("db")
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(pauseLease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(pauseInterval / time.Second))
	})
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	_, err := rec.wait(f.ctx, timeout, "created", func(leaseVersion) bool { return true })
	f.g.Expect(err).NotTo(HaveOccurred())
	pa := f.startHolder(bin, a, holderOptions{Margin: pauseMargin, Go: goHolder})
	pb := f.startHolder(bin, b, holderOptions{Margin: pauseMargin, Go: goHolder})

	// a holds, from its first own renewal, and renews again, one to three
	// times (so that the pause falls at any phase of the operator's
	// reconciles, which follow the lease duration).
	startA, err := pa.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	grantA, err := rec.grantTo(f.ctx, a.UID, 0, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	renewals := 1 + rand.IntN(3)
	renewed, err := rec.wait(f.ctx, timeout, "renewed by a", func(v leaseVersion) bool {
		return v.Transitions == grantA.Transitions && len(rec.renewalsAfter(grantA.Transitions, startA.At)) >= renewals &&
			v.RenewTime.Equal(rec.renewalsAfter(grantA.Transitions, startA.At)[renewals-1])
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(startA.Token).To(Equal(renewed.Fence), "a's child runs with the fence of a's grant")

	// Pause a at a random moment of its renew interval.
	run := pauseRun{Early: early, Offset: rand.N(pauseInterval)}
	time.Sleep(time.Until(renewed.Seen.Add(run.Offset)))
	pausedAt := time.Now()
	f.g.Expect(pa.freeze()).To(Succeed())
	rec.dumpOnFailure(t, pausedAt)
	time.Sleep(200 * time.Millisecond) // a renewal already on its way lands
	run.LastRenewal = rec.lastRenewal(grantA.Transitions)
	deadline := run.LastRenewal.Add(pauseLease - pauseMargin)
	var resume time.Time
	if early {
		resume = deadline.Add(20*time.Millisecond + rand.N(pauseMargin-120*time.Millisecond))
	} else {
		resume = pausedAt.Add(pauseLease + rand.N(2*pauseLease))
	}
	time.Sleep(time.Until(resume))
	run.Resumed = time.Now()
	run.Paused = run.Resumed.Sub(pausedAt)
	f.g.Expect(pa.thaw()).To(Succeed())

	// b is granted and its child starts; a's child stops.
	grantB, err := rec.grantTo(f.ctx, b.UID, grantA.Transitions, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	startB, err := pb.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	stopA, err := pa.waitStop(f.ctx, startA.PID, timeout)
	f.g.Expect(err).NotTo(HaveOccurred(), "a's child stops once a runs again")
	run.Granted, run.Stopped = grantB.AcquireTime, stopA.At
	committedB, err := rec.committed(f.ctx, grantB.Transitions, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(startB.Token).To(Equal(committedB.Fence))
	f.g.Expect(startB.Token).To(BeNumerically(">", startA.Token))

	// The deadline counts every renewal of a's grant, even one a sent after
	// it resumed: it is the latest any holder's clock could allow.
	run.Deadline = rec.lastRenewal(grantA.Transitions).Add(pauseLease - pauseMargin)
	run.LateRenewals = rec.renewalsAfter(grantA.Transitions, pausedAt)
	run.ValidUntil = run.Deadline
	if run.Stopped.Before(run.ValidUntil) {
		run.ValidUntil = run.Stopped
	}
	run.Gap = run.Granted.Sub(run.ValidUntil)
	for _, v := range rec.all() {
		run.Released = run.Released || v.Transitions == grantA.Transitions && v.State == fencingv1alpha1.LeaseStateReleased
	}
	why, err := pa.waitEndReason(f.ctx, startA.Token, timeout)
	f.g.Expect(err).NotTo(HaveOccurred(), "a's session says why the grant ended")
	if ago, ok := pa.deadlinePassedBy(startA.Token); ok {
		// The grant was ended, then the stop line written: the stop line
		// minus "ago" is no earlier than a's own deadline.
		run.LogGap, run.HaveLogGap = run.Granted.Sub(run.Stopped.Add(-ago)), true
	}
	// fence run stops the child for its own deadline, or for the end of the
	// grant its session reported, whichever it saw first on resuming.
	byDeadline := false
	if !goHolder {
		line, err := pa.waitLossLine(f.ctx, startA.PID, timeout)
		f.g.Expect(err).NotTo(HaveOccurred(), "fence run says why it stopped the child")
		byDeadline = strings.Contains(line.Text, deadlineStop(startA.Token))
		if !byDeadline {
			f.g.Expect(line.Text).To(ContainSubstring(why))
		}
	}
	switch {
	case byDeadline, strings.Contains(why, "no successful renewal"):
		run.Reason = "deadline"
	case strings.Contains(why, "the Lease moved"):
		run.Reason = "Lease moved"
	default:
		run.Reason = why
	}
	for _, e := range pa.events() {
		if e.PID == startA.PID && e.Kind == "beat" && !e.At.Before(run.Resumed) && e.At.Before(run.Stopped) {
			run.ThawBeats++
		}
	}
	own := "-"
	if run.HaveLogGap {
		own = run.LogGap.Round(time.Millisecond).String()
	}
	for _, r := range run.LateRenewals {
		t.Logf("a renewal of a's grant sent %s after a's deadline (the last renewal before the pause + lease − margin) was accepted",
			r.Sub(deadline).Round(time.Millisecond))
	}
	t.Logf("go=%v early=%v renewals=%d offset=%s paused=%s: b granted %s after a's validity ended (after the deadline a reported: %s); a's work stopped %s after it resumed (%s, %d beats in between); late renewals by a: %d; released: %v",
		goHolder, early, renewals, run.Offset.Round(time.Millisecond), run.Paused.Round(time.Millisecond), run.Gap.Round(time.Millisecond),
		own, run.Stopped.Sub(run.Resumed).Round(10*time.Microsecond), run.Reason, run.ThawBeats, len(run.LateRenewals), run.Released)

	// Invariant 8: a's own validity ended before b was granted.
	f.g.Expect(run.Gap).To(BeNumerically(">=", 0), "b granted %s before a's validity ended", -run.Gap)
	if run.HaveLogGap {
		f.g.Expect(run.LogGap).To(BeNumerically(">=", 0), "b granted before the deadline fence run reported")
	}
	// The pause was real: a's child did nothing while it was stopped, and
	// stopped only once it had been continued.
	for _, e := range pa.events() {
		if e.PID == startA.PID && e.At.After(pausedAt.Add(5*time.Millisecond)) && e.At.Before(run.Resumed) {
			t.Fatalf("a's child logged %s at %s while it was stopped", e.Kind, e.At)
		}
	}
	f.g.Expect(run.Stopped).To(BeTemporally(">=", run.Resumed))
	// a acts on no stale belief: its child is stopped, nothing of it follows
	// the stop line, and no child starts again under the old grant.
	// Resumed past its deadline, the child is killed at once: then its last
	// line is one it wrote before fence run reported the kill.
	last, _ := pa.lastOf(startA.PID)
	if stopA.Kind == "killed" {
		f.g.Expect(last.At).To(BeTemporally("<=", stopA.At))
	} else {
		f.g.Expect(last.Kind).To(Equal("stop"))
	}
	f.g.Expect(pa.starts()).To(HaveLen(1), "a starts no other child")
	if goHolder {
		// A Go holder asks Current before every side effect: none follows
		// its deadline, even in the instant after it was continued.
		for _, e := range pa.events() {
			if e.PID == startA.PID && e.Kind == "beat" {
				f.g.Expect(e.At).To(BeTemporally("<", run.Deadline), "a beat of the Go holder after its deadline")
			}
		}
		f.g.Expect(run.ThawBeats).To(BeZero())
	}
	if run.Unwarned() {
		// Resumed before the operator could even end a's grant (its expiry
		// is at least a lease duration after a renewal's send time): nothing
		// could tell a that its grant was over. It stops on its own clock,
		// before the grant to b, and b's work starts only after a's stopped.
		f.g.Expect(run.Reason).To(Equal("deadline"))
		f.g.Expect(run.Stopped).To(BeTemporally("<", run.Granted), "a's work stopped before b was granted")
		f.g.Expect(startB.At).To(BeTemporally(">", run.Stopped), "b's work started after a's stopped")
	}
	return run
}

// pauseRuns runs n paused-holder runs, a third of them early, as parallel
// subtests (at most -parallel at once) and returns what they measured: a is
// fence run with its child, or with goHolder a Go program with its own
// Session.
func pauseRuns(t *testing.T, n int, goHolder bool) []pauseRun {
	bin := buildBinaries(t)
	early := func(i int) bool { return i%3 == 0 }
	return parallelRuns(t, n, func(i int) string { return fmt.Sprintf("%03d-early=%v", i, early(i)) },
		func(t *testing.T, i int) pauseRun { return pausedPastDeadline(t, bin, early(i), goHolder) })
}

// TestFenceRunPausedPastItsDeadline is the short variant of the
// paused-holder proof (make holder-bench runs 100): two runs, one early.
func TestFenceRunPausedPastItsDeadline(t *testing.T) {
	t.Parallel()
	pauseRuns(t, 2, false)
}

// TestGoHolderPausedPastItsDeadline: the same with a Go holder that uses
// pkg/fence's Session itself (make holder-bench runs 30): one early run.
func TestGoHolderPausedPastItsDeadline(t *testing.T) {
	t.Parallel()
	pauseRuns(t, 1, true)
}
