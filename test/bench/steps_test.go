//go:build bench

package bench_test

import "sigs.k8s.io/controller-runtime/pkg/metrics"

// Steps is where the operator's reconciles of a kind spent their time in a
// run: the mean of each step (fencedlease_reconcile_step_seconds) of the
// reconciles whose plan granted, and the mean wait in the work queue of
// every reconcile (workqueue_queue_duration_seconds), in milliseconds.
type Steps struct {
	// Grants is how many grant reconciles the means are of.
	Grants float64            `json:"grants"`
	Grant  map[string]float64 `json:"grant_ms"`
	Queue  float64            `json:"queue_ms"`
}

// timings is a histogram's sum and count, by series.
type timings map[string][2]float64

// readTimings reads, from the registry of the operator in this process, the
// step histograms of grant reconciles (by step) and the work queue's wait
// ("queue").
func readTimings() timings {
	out := timings{}
	fams, err := metrics.Registry.Gather()
	if err != nil {
		return out
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			h := m.GetHistogram()
			switch {
			case f.GetName() == "fencedlease_reconcile_step_seconds" && l["action"] == "Grant":
				out[l["step"]] = [2]float64{h.GetSampleSum(), float64(h.GetSampleCount())}
			case f.GetName() == "workqueue_queue_duration_seconds" && l["name"] == "fencedlease":
				out["queue"] = [2]float64{h.GetSampleSum(), float64(h.GetSampleCount())}
			}
		}
	}
	return out
}

// stepsBetween is the means of what happened between two readings.
func stepsBetween(before, after timings) Steps {
	s := Steps{Grant: map[string]float64{}}
	mean := func(k string) (float64, float64) {
		sum, n := after[k][0]-before[k][0], after[k][1]-before[k][1]
		if n <= 0 {
			return 0, 0
		}
		return 1000 * sum / n, n
	}
	for k := range after {
		if k == "queue" {
			continue
		}
		var n float64
		s.Grant[k], n = mean(k)
		s.Grants = max(s.Grants, n)
	}
	s.Queue, _ = mean("queue")
	return s
}
