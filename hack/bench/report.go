package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The JSON the tests write (test/bench, test/scale).
type (
	sample struct {
		Published    float64 `json:"published_ms"`
		Knows        float64 `json:"knows_ms"`
		AfterRenewal float64 `json:"after_renewal_ms"`
	}
	series struct {
		System  string   `json:"system"`
		Config  string   `json:"config"`
		Cause   string   `json:"cause"`
		Timing  string   `json:"timing"`
		Samples []sample `json:"samples"`
	}
	failover struct {
		Handoffs  int      `json:"handoffs"`
		Groups    int      `json:"groups"`
		NodeGrace string   `json:"node_grace"`
		Series    []series `json:"series"`
		CASProbe  struct {
			CAS      []float64 `json:"cas_ms"`
			Delivery []float64 `json:"delivery_ms"`
		} `json:"cas_probe"`
		Steps struct {
			Grants   float64            `json:"grants"`
			Grant    map[string]float64 `json:"grant_ms"`
			Queue    float64            `json:"queue_ms"`
			API      map[string]float64 `json:"api_ms"`
			APICount map[string]float64 `json:"api_count"`
		} `json:"steps"`
	}
	queue struct {
		Count float64 `json:"count"`
		P50   float64 `json:"p50_s"`
		P90   float64 `json:"p90_s"`
		P99   float64 `json:"p99_s"`
		Mean  float64 `json:"mean_s"`
	}
	window struct {
		Seconds         float64 `json:"seconds"`
		Writes          int     `json:"lease_writes"`
		WritesPerSecond float64 `json:"lease_writes_per_s"`
		PerLease        float64 `json:"lease_writes_per_s_per_lease"`
		Regrants        int     `json:"regrants"`
		FencesChanged   int     `json:"fences_changed"`
		CPUPercent      float64 `json:"cpu_percent"`
		MaxRSSMiB       float64 `json:"max_rss_mib"`
		HeapInuseMiB    float64 `json:"heap_inuse_mib"`
		Queue           queue   `json:"queue"`
		ControlPlane    struct {
			APIServerCPUPercent float64 `json:"apiserver_cpu_percent"`
			EtcdCPUPercent      float64 `json:"etcd_cpu_percent"`
			APIServerMaxRSSMiB  float64 `json:"apiserver_max_rss_mib"`
		} `json:"control_plane"`
	}
	restart struct {
		Cache      string  `json:"cache"`
		AllRenewed float64 `json:"all_renewed_s"`
		AllHeld    float64 `json:"all_held_s"`
		Regrants   int     `json:"regrants"`
		Window     window  `json:"window"`
	}
	scale struct {
		Leases       int     `json:"leases"`
		PodsPerLease int     `json:"pods_per_lease"`
		PodsCreated  float64 `json:"pods_created_s"`
		ColdStart    float64 `json:"cold_start_s"`
		ColdProgress []struct {
			Seconds float64 `json:"s"`
			Held    int     `json:"held"`
		} `json:"cold_progress"`
		ColdQueue          queue              `json:"cold_queue"`
		ColdWritesPerGrant map[string]float64 `json:"cold_writes_per_grant"`
		Ceiling            struct {
			Grants          int     `json:"grants"`
			Workers         int     `json:"workers"`
			Writes          int     `json:"writes"`
			WritesPerSecond float64 `json:"writes_per_s"`
		} `json:"ceiling"`
		ColdShare          float64   `json:"cold_share"`
		ColdRegrants       int       `json:"cold_regrants"`
		WaitingForCapacity int       `json:"waiting_for_capacity"`
		Steady             window    `json:"steady"`
		Restarts           []restart `json:"restarts"`
		ClientGo           struct {
			Groups          int     `json:"groups"`
			Candidates      int     `json:"candidates"`
			Seconds         float64 `json:"seconds"`
			Writes          int     `json:"lease_writes"`
			WritesPerSecond float64 `json:"lease_writes_per_s"`
			PerGroup        float64 `json:"lease_writes_per_s_per_group"`
		} `json:"client_go"`
	}
)

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1)+0.5)]
}

func sortedOf(ss []sample, f func(sample) float64) []float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	return v
}

// dur formats milliseconds: ms below 10 s, else seconds.
func dur(ms float64) string {
	if ms < 10000 {
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
}

func dist(v []float64) string {
	if len(v) == 0 {
		return "– | – | – | –"
	}
	return fmt.Sprintf("%s | %s | %s | %s", dur(quantile(v, 0.5)), dur(quantile(v, 0.9)), dur(quantile(v, 0.99)), dur(v[len(v)-1]))
}

func report(dir string) error {
	var b strings.Builder
	var m meta
	if err := readJSON(filepath.Join(dir, "meta.json"), &m); err != nil {
		return err
	}
	fmt.Fprintf(&b, "# Benchmark results\n\n`%s`, %s to %s UTC; %d CPUs, %s, %s.\n\n", m.Command,
		m.Started.Format("Mon Jan 2 15:04"), m.Ended.Format("15:04"), m.CPUs, m.CPU, m.Go)
	b.WriteString("| part | started (UTC) | took | 1-min load average min / mean / max | result |\n|---|---|---|---|---|\n")
	names := make([]string, 0, len(m.Steps))
	for k := range m.Steps {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return m.Steps[names[i]].Started.Before(m.Steps[names[j]].Started) })
	for _, k := range names {
		j := m.Steps[k]
		fmt.Fprintf(&b, "| %s | %s | %.0f s | %s | %s |\n", k, j.Started.Format("15:04:05"), j.Seconds, loadStats(j.Load), map[bool]string{true: "FAILED", false: "passed"}[j.Failed])
	}
	var f failover
	if err := readJSON(filepath.Join(dir, "failover.json"), &f); err == nil {
		writeFailover(&b, f)
		if err := plotFailover(dir, f); err != nil {
			return err
		}
	}
	if rows, err := admission(filepath.Join(dir, "admission.log")); err == nil && len(rows) > 0 {
		b.WriteString("\n## Fencing webhook admission latency\n\n| run | p50 protected / unprotected (ms) | p50 added (ms) | p99 protected / unprotected (ms) | p99 added (ms) | handler mean (µs) |\n|---|---|---|---|---|---|\n")
		for i, r := range rows {
			fmt.Fprintf(&b, "| %d | %.2f / %.2f | %.2f | %.2f / %.2f | %.2f | %.0f |\n", i+1, r["p50-protected-ms"], r["p50-unprotected-ms"], r["p50-added-ms"],
				r["p99-protected-ms"], r["p99-unprotected-ms"], r["p99-added-ms"], r["handler-mean-µs"])
		}
	}
	var runs []scale
	files, _ := filepath.Glob(filepath.Join(dir, "scale-*.json"))
	for _, file := range files {
		var s scale
		if err := readJSON(file, &s); err == nil {
			runs = append(runs, s)
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Leases < runs[j].Leases })
	if len(runs) > 0 {
		writeScale(&b, runs)
		if err := plotScale(dir, runs); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644)
}

func loadStats(l []float64) string {
	if len(l) == 0 {
		return "–"
	}
	lo, hi, sum := l[0], l[0], 0.0
	for _, v := range l {
		lo, hi, sum = min(lo, v), max(hi, v), sum+v
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f", lo, sum/float64(len(l)), hi)
}

func writeFailover(b *strings.Builder, f failover) {
	fmt.Fprintf(b, "\n## Failover\n\n%d handoffs per row over %d groups at once; node lost: the node lifecycle controller's grace period %s. "+
		"Published: from the cause to the new holder published; knows: to the new holder's process knowing; "+
		"after renewal: from the old grant's last renewal to the new holder published.\n\n", f.Handoffs, f.Groups, f.NodeGrace)
	b.WriteString("| system | configuration | cause | n | published p50 | p90 | p99 | max | knows p50 | p90 | p99 | max | after renewal p50 | p99 | max |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range f.Series {
		after := sortedOf(s.Samples, func(x sample) float64 { return x.AfterRenewal })
		afterCols := "– | – | –"
		if len(after) > 0 {
			afterCols = fmt.Sprintf("%s | %s | %s", dur(quantile(after, 0.5)), dur(quantile(after, 0.99)), dur(after[len(after)-1]))
		}
		fmt.Fprintf(b, "| %s | %s (%s) | %s | %d | %s | %s | %s |\n", s.System, s.Config, s.Timing, s.Cause, len(s.Samples),
			dist(sortedOf(s.Samples, func(x sample) float64 { return x.Published })),
			dist(sortedOf(s.Samples, func(x sample) float64 { return x.Knows })), afterCols)
	}
	b.WriteString("\nclient-go has no notion of a node: a lost node is a crash from its view (the crash rows).\n")
	writeTakeoverBudget(b, f)
	b.WriteString("\n![failover, published](failover-published.png)\n\n![failover, knows](failover-knows.png)\n")
}

// writeTakeoverBudget sets the Immediate takeovers against what they are
// made of in the same run: four Lease compare-and-swap round trips (the
// cause's write, the grant, the commit, the publication) and the watch
// delivery the operator waits on.
func writeTakeoverBudget(b *strings.Builder, f failover) {
	cas, delivery := slices.Sorted(slices.Values(f.CASProbe.CAS)), slices.Sorted(slices.Values(f.CASProbe.Delivery))
	if len(cas) == 0 || len(delivery) == 0 {
		return
	}
	fmt.Fprintf(b, "\nIn the same run, a Lease of its own written every 100 ms: compare-and-swap round trip p50 %s, p99 %s (%d); "+
		"watch delivery after the reply p50 %s, p99 %s. The budget of a takeover is four round trips and one delivery:\n\n",
		dur(quantile(cas, 0.5)), dur(quantile(cas, 0.99)), len(cas), dur(quantile(delivery, 0.5)), dur(quantile(delivery, 0.99)))
	b.WriteString("| Immediate takeover | published p50 | budget p50 | share | published p99 | budget p99 | share |\n|---|---|---|---|---|---|---|\n")
	for _, s := range f.Series {
		if s.System != "fencedlease" || s.Config != "Immediate" || s.Cause == "node lost" {
			continue
		}
		pub := sortedOf(s.Samples, func(x sample) float64 { return x.Published })
		if len(pub) == 0 {
			continue
		}
		row := func(p float64) (float64, float64) {
			return quantile(pub, p), 4*quantile(cas, p) + quantile(delivery, p)
		}
		p50, b50 := row(0.5)
		p99, b99 := row(0.99)
		fmt.Fprintf(b, "| %s | %s | %s | %.2f | %s | %s | %.2f |\n", s.Cause, dur(p50), dur(b50), p50/b50, dur(p99), dur(b99), p99/b99)
	}
	writeGrantSteps(b, f)
}

// writeGrantSteps takes the mean Immediate takeover apart: the test's own
// write that causes it, the two watch deliveries (to the operator, and of
// the publication to the test), the work queue's wait and the steps of the
// grant reconcile, each its mean in the same run (means add up; quantiles
// do not). What is left is the time no measure covers.
func writeGrantSteps(b *strings.Builder, f failover) {
	st := f.Steps
	var pub []float64
	for _, s := range f.Series {
		if s.System == "fencedlease" && s.Config == "Immediate" && s.Cause == "crash" {
			for _, x := range s.Samples {
				pub = append(pub, x.Published)
			}
		}
	}
	if st.Grants == 0 || len(pub) == 0 || len(f.CASProbe.CAS) == 0 {
		return
	}
	ms := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" }
	takeover, cas, delivery := mean(pub), mean(f.CASProbe.CAS), mean(f.CASProbe.Delivery)
	fmt.Fprintf(b, "\nThe mean Immediate takeover (crash) taken apart, each part its mean in the same run (fencedlease_reconcile_step_seconds over the run's %.0f takeovers, workqueue_queue_duration_seconds over every reconcile):\n\n", st.Grants)
	b.WriteString("| part | mean | round trips |\n|---|---|---|\n")
	rows := []struct {
		name string
		v    float64
		rt   string
	}{
		{"the test's write that makes the holder not ready (one Lease compare-and-swap's mean)", cas, "1"},
		{"two watch deliveries: the pod's change to the operator, the publication to the test", 2 * delivery, ""},
		{"the work queue's wait", st.Queue, ""},
		{"inputs (from the caches)", st.Grant["inputs"], "0"},
		{"lease: the grant write, then the commit beside the old holder's demotion", st.Grant["lease"], "2"},
		{"pods (from the caches; a takeover writes none)", st.Grant["pods"], "0"},
		{"status: the patch beside the publication's list and Lease read, then the publication", st.Grant["status"], "2"},
	}
	sum := 0.0
	for _, r := range rows {
		sum += r.v
		fmt.Fprintf(b, "| %s | %s | %s |\n", r.name, ms(r.v), r.rt)
	}
	fmt.Fprintf(b, "| **sum** | **%s** | 5 |\n| the takeover as measured | %s | |\n", ms(sum), ms(takeover))
	var reqs []string
	for _, k := range []string{"PUT leases", "PATCH pods", "PATCH fencedleases/status", "LIST pods", "GET leases", "PUT pods/status"} {
		if n := st.APICount[k]; n > 0 {
			reqs = append(reqs, fmt.Sprintf("%s %s (%.0f)", k, ms(st.API[k]), n))
		}
	}
	if len(reqs) > 0 {
		fmt.Fprintf(b, "\nThe API server's own mean time per request in the same run (apiserver_request_duration_seconds; count): %s.\n", strings.Join(reqs, ", "))
	}
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

func writeScale(b *strings.Builder, runs []scale) {
	b.WriteString("\n## Scale\n\n| leases (pods) | pods created | cold start: all held | steady state | Lease writes/s | per lease | re-grants | fences changed | CPU | max RSS | heap in use | kube-apiserver / etcd CPU (steady) | queue wait mean; p50 / p99 (cold start) | queue wait mean; p50 / p99 (steady) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		s := r.Steady
		cold := fmt.Sprintf("%.1f s", r.ColdStart)
		if r.ColdStart == 0 && len(r.ColdProgress) > 0 {
			last := r.ColdProgress[len(r.ColdProgress)-1]
			cold = fmt.Sprintf("**not all held**: %d of %d after %.0f s (held after 60 s: %d; %d re-grants; %d waiting for capacity)",
				last.Held, r.Leases, last.Seconds, heldAt(r, 60), r.ColdRegrants, r.WaitingForCapacity)
		}
		if s.Seconds == 0 {
			fmt.Fprintf(b, "| %d (%d) | %.0f s | %s | – | | | | | | | | | %s | |\n",
				r.Leases, r.Leases*r.PodsPerLease, r.PodsCreated, cold, qs(r.ColdQueue))
			continue
		}
		fmt.Fprintf(b, "| %d (%d) | %.0f s | %s | %.0f s | %.1f | %.3f | %d | %d | %.1f %% | %.0f MiB | %.0f MiB | %.0f %% / %.0f %% | %s | %s |\n",
			r.Leases, r.Leases*r.PodsPerLease, r.PodsCreated, cold, s.Seconds, s.WritesPerSecond, s.PerLease, s.Regrants, s.FencesChanged,
			s.CPUPercent, s.MaxRSSMiB, s.HeapInuseMiB, s.ControlPlane.APIServerCPUPercent, s.ControlPlane.EtcdCPUPercent, qs(r.ColdQueue), qs(s.Queue))
	}
	b.WriteString("\nThe cold start as a share of this machine's ceiling, measured in the same run before the operator starts: the API server's rate for the writes a first grant makes (the same mix, on as many workers as the operator reconciles at once, as fast as it takes them). 1.0 would be the operator making its writes as fast as the API server takes them.\n\n| leases | ceiling: writes/s (grants × writes, workers) | operator: first grants/s × writes each | share of the ceiling |\n|---|---|---|---|\n")
	for _, r := range runs {
		if r.Ceiling.WritesPerSecond == 0 {
			fmt.Fprintf(b, "| %d | not measured (a run before the ceiling was) | | |\n", r.Leases)
			continue
		}
		perGrant := 0.0
		for _, v := range r.ColdWritesPerGrant {
			perGrant += v
		}
		op, sh := "cold start unfinished", "–"
		if r.ColdStart > 0 {
			op, sh = fmt.Sprintf("%.1f × %.2f = %.0f writes/s", float64(r.Leases)/r.ColdStart, perGrant, float64(r.Leases)/r.ColdStart*perGrant), fmt.Sprintf("**%.2f**", r.ColdShare)
		}
		fmt.Fprintf(b, "| %d | %.0f (%d × %d, %d) | %s | %s |\n", r.Leases, r.Ceiling.WritesPerSecond, r.Ceiling.Grants, r.Ceiling.Writes/max(r.Ceiling.Grants, 1), r.Ceiling.Workers, op, sh)
	}
	b.WriteString("\nQueue wait: workqueue_queue_duration_seconds of the operator (from ready to picked up); its buckets are powers of ten apart, so p50 and p99 are interpolated within a factor of ten, the mean is exact.\n")
	b.WriteString("\nOperator restarts (the process killed and started again), then a window of steady state:\n\n| leases | cache | every Lease renewed by the new process | all held and published | re-grants until then; in the window | window | max RSS | heap in use | CPU | Lease writes/s per lease |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		for _, x := range r.Restarts {
			renewed, held := fmt.Sprintf("%.1f s", x.AllRenewed), fmt.Sprintf("%.1f s", x.AllHeld)
			if r.ColdStart == 0 {
				renewed, held = "not waited for (cold start unfinished)", "–"
			}
			fmt.Fprintf(b, "| %d | %s | %s | %s | %d; %d | %.0f s | %.0f MiB | %.0f MiB | %.1f %% | %.3f |\n", r.Leases, x.Cache, renewed, held, x.Regrants,
				x.Window.Regrants, x.Window.Seconds, x.Window.MaxRSSMiB, x.Window.HeapInuseMiB, x.Window.CPUPercent, x.Window.PerLease)
		}
	}
	b.WriteString("\nclient-go elections with the same number of candidates per group and its default timing (15 s / 10 s / 2 s), measured:\n\n| leases | groups measured | Lease writes/s | per group | for as many groups as leases | fencedlease, Lease writes/s |\n|---|---|---|---|---|---|\n")
	for _, r := range runs {
		c := r.ClientGo
		fl := fmt.Sprintf("%.1f (%.3f per lease)", r.Steady.WritesPerSecond, r.Steady.PerLease)
		if r.ColdStart == 0 && r.Steady.Seconds > 0 {
			held := r.ColdProgress[len(r.ColdProgress)-1].Held
			fl = fmt.Sprintf("%.1f (%.3f per lease held, of %d held)", r.Steady.WritesPerSecond, r.Steady.WritesPerSecond/float64(max(held, 1)), held)
		} else if r.ColdStart == 0 && len(r.Restarts) > 0 {
			w := r.Restarts[0].Window
			fl = fmt.Sprintf("%.1f (%.3f per lease; after a restart, not all held)", w.WritesPerSecond, w.PerLease)
		}
		fmt.Fprintf(b, "| %d | %d | %.1f | %.3f | %.1f | %s |\n", r.Leases, c.Groups, c.WritesPerSecond, c.PerGroup, c.PerGroup*float64(r.Leases), fl)
	}
	b.WriteString("\n![memory](scale-memory.png)\n\n![writes](scale-writes.png)\n\n![time until all held](scale-time.png)\n\n![cold start progress](scale-cold.png)\n")
}

// heldAt is how many were held at the last poll before t seconds.
func heldAt(r scale, t float64) int {
	n := 0
	for _, p := range r.ColdProgress {
		if p.Seconds <= t {
			n = p.Held
		}
	}
	return n
}

// qs formats a work queue wait: the mean is exact; the quantiles are
// interpolated within histogram buckets that are powers of ten apart.
func qs(q queue) string {
	return fmt.Sprintf("%s; %s / %s", secs(q.Mean), secs(q.P50), secs(q.P99))
}

func secs(s float64) string {
	if s < 0.001 {
		return strconv.FormatFloat(s*1e6, 'f', 0, 64) + " µs"
	}
	if s < 1 {
		return strconv.FormatFloat(s*1000, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(s, 'f', 2, 64) + " s"
}

// admission reads the metrics of every BenchmarkAdmissionLatency line.
func admission(path string) ([]map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []map[string]float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "BenchmarkAdmissionLatency") {
			continue
		}
		row := map[string]float64{}
		for i := 2; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				row[fields[i+1]] = v
			}
		}
		rows = append(rows, row)
	}
	return rows, sc.Err()
}
