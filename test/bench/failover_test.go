//go:build bench

package bench_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestFailover measures, in one run on one API server, BENCH_HANDOFFS
// handoffs (20) of every configuration and cause, spread over BENCH_GROUPS
// independent groups (10) that run at once: fencedlease Safe and Immediate
// (one operator in the test process, 15 s leases renewed every 5 s) for a
// deleted pod, containers turning not ready and a lost node (the node
// lifecycle controller of kube-controller-manager marks it lost
// BENCH_NODE_GRACE, 6 s, after the last heartbeat), and client-go candidates
// with its default timing, with ReleaseOnCancel and tuned, for a cancelled
// candidate and a killed one. BENCH_ONLY, if set, keeps only the series
// whose "system configuration cause" contains it; BENCH_API_RTT, if set,
// holds back every request of the operator by that long (withRTT).
// Beside them, a Lease of its own is written every 100 ms (probeCAS): the
// same run's compare-and-swap round trip and watch delivery, what an
// Immediate takeover is made of. Asserted: every handoff happens, to the other candidate, with a higher
// fence for fencedlease, never two published holders
// (testenv.WatchHolders) and never two client-go leaders at once.
func TestFailover(t *testing.T) {
	handoffs, groups := envInt("BENCH_HANDOFFS", 20), envInt("BENCH_GROUPS", 10)
	groups = min(groups, handoffs)
	grace := envDuration("BENCH_NODE_GRACE", 6*time.Second)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	kcm, err := env.StartControllerManager(t.TempDir(), "--controllers=node-lifecycle-controller",
		"--node-monitor-period=1s", "--node-monitor-grace-period="+grace.String())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if out := kcm.Stop(); t.Failed() {
			t.Logf("kube-controller-manager output (last 4 KiB):\n%s", out[max(0, len(out)-4096):])
		}
	})
	ns, err := testenv.Namespace(ctx, env.Client, "bench")
	g.Expect(err).NotTo(HaveOccurred())
	w := newWorld(ctx, t, env.Client, ns)
	for i := range 4 {
		g.Expect(w.heartbeat(sharedNode(i))).To(Succeed())
	}
	checker, err := testenv.WatchHolders(ctx, env.Config, ns)
	g.Expect(err).NotTo(HaveOccurred())
	m, err := testenv.StartManager(ctx, withRTT(env.Config, envDuration("BENCH_API_RTT", 0)), testenv.ManagerOptions{Namespace: ns})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())

	type job struct {
		series Series
		run    func(group, n int) ([]Sample, error)
	}
	var jobs []*job
	const leaseDur = 15 * time.Second
	for _, takeover := range []fencingv1alpha1.TakeoverPolicy{fencingv1alpha1.TakeoverImmediate, fencingv1alpha1.TakeoverSafe} {
		for _, cause := range []string{graceful, crash, nodeLost} {
			jobs = append(jobs, &job{
				series: Series{System: "fencedlease", Config: string(takeover), Cause: cause, Timing: "15 s lease, renewed every 5 s"},
				run: func(i, n int) ([]Sample, error) {
					name := fmt.Sprintf("fl-%s-%s-%d", strings.ToLower(string(takeover)), strings.ReplaceAll(cause, " ", "-"), i)
					grp := &flGroup{w: w, name: name, takeover: takeover, cause: cause, leaseDur: leaseDur}
					return grp.run(n, grace)
				},
			})
		}
	}
	for _, timing := range []cgTiming{
		{name: "default", lease: 15 * time.Second, renewDeadline: 10 * time.Second, retry: 2 * time.Second},
		{name: "release-on-cancel", lease: 15 * time.Second, renewDeadline: 10 * time.Second, retry: 2 * time.Second, releaseOnCancel: true},
		{name: "tuned", lease: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retry: 500 * time.Millisecond, releaseOnCancel: true},
	} {
		for _, cause := range []string{graceful, crash} {
			jobs = append(jobs, &job{
				series: Series{System: "client-go", Config: timing.name, Cause: cause, Timing: timing.String()},
				run: func(i, n int) ([]Sample, error) {
					name := fmt.Sprintf("cg-%s-%s-%d", timing.name, cause, i)
					return (&cgGroup{w: w, cs: cs, name: name, timing: timing, cause: cause}).run(n)
				},
			})
		}
	}

	if only := os.Getenv("BENCH_ONLY"); only != "" {
		jobs = slices.DeleteFunc(jobs, func(j *job) bool {
			return !strings.Contains(j.series.System+" "+j.series.Config+" "+j.series.Cause, only)
		})
	}
	probed := probeCAS(ctx, t, cs, ns, 100*time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, j := range jobs {
		if j.series.System == "fencedlease" {
			w.steady.arrived.Add(groups)
		}
	}
	for _, j := range jobs {
		for i := range groups {
			n := handoffs / groups
			if i < handoffs%groups {
				n++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				samples, err := j.run(i, n)
				for k := range samples {
					samples[k].Group, samples[k].Seq = i, k
				}
				if err != nil {
					t.Errorf("%s %s, %s: %v", j.series.System, j.series.Config, j.series.Cause, err)
				}
				mu.Lock()
				j.series.Samples = append(j.series.Samples, samples...)
				mu.Unlock()
			}()
		}
	}
	// The operator's timings count from when every fencedlease group holds
	// its first grant: the grant reconciles measured are the takeovers.
	w.steady.arrived.Wait()
	timings0, api0 := readTimings(), readAPITimings(ctx, env.Config)
	close(w.steady.start)
	wg.Wait()
	t.Logf("%d series of %d handoffs in %s", len(jobs), handoffs, time.Since(start).Round(time.Second))

	res := Result{Handoffs: handoffs, Groups: groups, NodeGrace: grace.String(), CASProbe: probed(), Steps: stepsBetween(timings0, readTimings())}
	res.Steps.API, res.Steps.APICount = apiBetween(api0, readAPITimings(ctx, env.Config), 10)
	for _, j := range jobs {
		res.Series = append(res.Series, j.series)
		var pub, knows []float64
		for _, s := range j.series.Samples {
			pub, knows = append(pub, s.Published), append(knows, s.Knows)
		}
		t.Logf("%-11s %-17s %-9s published %s; knows %s", j.series.System, j.series.Config, j.series.Cause, quantiles(pub), quantiles(knows))
	}
	writeResult(t, res)
	g.Expect(checker.Violations()).To(BeEmpty(), "never two published holders")
	g.Expect(kcm.Exited()).To(BeFalse(), "kube-controller-manager is still running")
}

// quantiles formats p50/p90/p99/max of milliseconds.
func quantiles(v []float64) string {
	if len(v) == 0 {
		return "none"
	}
	v = slices.Clone(v)
	slices.Sort(v)
	q := func(p float64) float64 { return v[int(p*float64(len(v)-1)+0.5)] }
	return fmt.Sprintf("p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms (%d)", q(0.5), q(0.9), q(0.99), v[len(v)-1], len(v))
}
