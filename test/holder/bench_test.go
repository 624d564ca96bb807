//go:build holderbench

package holder_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// The long runs of the holder-renewal proofs, recorded in
// docs/benchmarks.md: make holder-bench. Each top-level test runs alone
// (none calls t.Parallel), its runs in parallel up to -parallel.

// benchN is $name as a count, def when unset.
func benchN(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive count", name, v)
		}
		return n
	}
	return def
}

func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(load))
	return fmt.Sprintf("%s %s/%s, %d CPUs, load average %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		strings.Join(f[:min(3, len(f))], " "))
}

// TestHolderBenchPause: HOLDER_BENCH_PAUSE_RUNS (100) paused runs of fence
// run.
func TestHolderBenchPause(t *testing.T) {
	t.Logf("start: %s", machine())
	runs := pauseRuns(t, benchN(t, "HOLDER_BENCH_PAUSE_RUNS", 100), false)
	t.Logf("end: %s", machine())
	summarizePause(t, runs)
}

// TestHolderBenchGoPause: HOLDER_BENCH_GO_PAUSE_RUNS (30) paused runs of a
// Go holder with its own Session.
func TestHolderBenchGoPause(t *testing.T) {
	t.Logf("start: %s", machine())
	runs := pauseRuns(t, benchN(t, "HOLDER_BENCH_GO_PAUSE_RUNS", 30), true)
	t.Logf("end: %s", machine())
	summarizePause(t, runs)
}

func summarizePause(t *testing.T, runs []pauseRun) {
	var all, before, after, logGap, stopLatency, failover, lateBy dist
	early, unwarned, beforeGrant, reasonDeadline, thaw, thawBeats := 0, 0, 0, 0, 0, 0
	late, lateBefore, released := 0, 0, 0
	for _, r := range runs {
		all = append(all, r.Gap)
		if r.HaveLogGap {
			logGap = append(logGap, r.LogGap)
		}
		stopLatency = append(stopLatency, r.Stopped.Sub(r.Resumed))
		if r.Early {
			early++
		}
		if r.Unwarned() {
			unwarned++
		}
		if r.Resumed.Before(r.Granted) {
			beforeGrant++
			before = append(before, r.Gap)
		} else {
			after = append(after, r.Gap)
		}
		if len(r.LateRenewals) > 0 {
			late++
			if r.Resumed.Before(r.Granted) {
				lateBefore++
			}
			for _, l := range r.LateRenewals {
				lateBy = append(lateBy, l.Sub(r.LastRenewal.Add(pauseLease-pauseMargin)))
			}
		} else if !r.Released {
			failover = append(failover, r.Granted.Sub(r.LastRenewal))
		}
		if r.Released {
			released++
		}
		if r.Reason == "deadline" {
			reasonDeadline++
		}
		if r.ThawBeats > 0 {
			thaw++
			thawBeats = max(thawBeats, r.ThawBeats)
		}
	}
	t.Logf("runs: %d (%d meant early); resumed before the operator could end a's grant: %d; before b's grant: %d, after: %d",
		len(runs), early, unwarned, beforeGrant, len(runs)-beforeGrant)
	t.Logf("gap = b's acquireTime − the end of a's validity (the earlier of its deadline, last accepted renewTime + lease − margin, and its stop line), all runs: %s", all)
	t.Logf("  resumed before b's grant: %s", before)
	t.Logf("  resumed after b's grant:  %s", after)
	t.Logf("gap to the deadline a reported itself: %s", logGap)
	t.Logf("a's work stopped (stop line) after its resumption: %s", stopLatency)
	t.Logf("ended for its deadline: %d runs, for the Lease moving on: %d", reasonDeadline, len(runs)-reasonDeadline)
	t.Logf("runs in which a beat between resumption and stop: %d (at most %d beats)", thaw, thawBeats)
	t.Logf("runs with a renewal of a's grant sent after a resumed, past its deadline, and accepted: %d (%d of them resumed before b's grant)", late, lateBefore)
	t.Logf("  sent after a's deadline by: %s", lateBy)
	t.Logf("b's acquireTime − a's last renewal, runs without a late renewal or a release (lease %s): %s", pauseLease, failover)
	t.Logf("runs in which a released its grant after its work stopped: %d", released)
}

// TestHolderBenchPartition: HOLDER_BENCH_PARTITION_RUNS (20) partitioned
// holders, and as many on a lost node.
func TestHolderBenchPartition(t *testing.T) {
	t.Logf("start: %s", machine())
	n := benchN(t, "HOLDER_BENCH_PARTITION_RUNS", 20)
	for _, lostNode := range []bool{false, true} {
		t.Run(fmt.Sprintf("lostNode=%v", lostNode), func(t *testing.T) {
			var gap, stop, grant, failover dist
			for _, r := range partitionRuns(t, n, lostNode) {
				gap = append(gap, r.Granted.Sub(r.Stopped))
				stop = append(stop, r.Stopped.Sub(r.Deadline))
				grant = append(grant, r.Granted.Sub(r.Cut))
				failover = append(failover, r.StartedB.Sub(r.Cut))
			}
			t.Logf("lostNode=%v, %d runs", lostNode, n)
			t.Logf("  b's acquireTime − a's child stop line: %s", gap)
			t.Logf("  a's child stop line − a's deadline by the Lease: %s", stop)
			t.Logf("  cut to b's acquireTime: %s", grant)
			t.Logf("  cut to b's child starting (failover): %s", failover)
		})
	}
	t.Logf("end: %s", machine())
}

// TestHolderBenchLearning: HOLDER_BENCH_HANDOFFS (50) handoffs per mode.
func TestHolderBenchLearning(t *testing.T) {
	t.Logf("start: %s", machine())
	results := learningRuns(t, benchN(t, "HOLDER_BENCH_HANDOFFS", 50))
	t.Logf("end: %s", machine())
	for _, mode := range []fencingv1alpha1.RenewalMode{fencingv1alpha1.RenewalHolder, fencingv1alpha1.RenewalOperator} {
		var start, commit, files dist
		for _, h := range results[mode] {
			start, commit = append(start, h.Start), append(commit, h.Commit)
			if h.Files > 0 {
				files = append(files, h.Files)
			}
		}
		t.Logf("%s: grant write to the new holder's child starting: %s", mode, start)
		t.Logf("%s:   grant write to the commit seen by a watch: %s", mode, commit)
		if len(files) > 0 {
			t.Logf("%s:   grant write to the token files swapped: %s", mode, files)
		}
	}
}
