//go:build bench

package bench_test

import (
	"context"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// Steps is where the operator's reconciles of a kind spent their time in a
// run: the mean of each step (fencedlease_reconcile_step_seconds) of the
// reconciles whose plan granted, and the mean wait in the work queue of
// every reconcile (workqueue_queue_duration_seconds), in milliseconds.
type Steps struct {
	// Grants is how many grant reconciles the means are of.
	Grants float64            `json:"grants"`
	Grant  map[string]float64 `json:"grant_ms"`
	Queue  float64            `json:"queue_ms"`
	// API is the API server's own mean time for each request of the run
	// (apiserver_request_duration_seconds), by verb and resource ("PUT
	// leases", "PATCH fencedleases/status"), and APICount their number: a
	// round trip of the operator less the network and the client.
	API      map[string]float64 `json:"api_ms"`
	APICount map[string]float64 `json:"api_count"`
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

// readAPITimings reads the API server's time per request, by verb and
// resource.
func readAPITimings(ctx context.Context, cfg *rest.Config) timings {
	out := timings{}
	fams, err := testenv.APIServerMetrics(ctx, cfg)
	if err != nil {
		return out
	}
	for _, m := range fams["apiserver_request_duration_seconds"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["verb"] == "WATCH" || l["verb"] == "CONNECT" {
			continue
		}
		k := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			k += "/" + l["subresource"]
		}
		h := m.GetHistogram()
		v := out[k]
		out[k] = [2]float64{v[0] + h.GetSampleSum(), v[1] + float64(h.GetSampleCount())}
	}
	return out
}

// apiBetween is the API server's mean time per request, by verb and
// resource, between two readings, of the requests made at least `least`
// times.
func apiBetween(before, after timings, least float64) (mean, count map[string]float64) {
	mean, count = map[string]float64{}, map[string]float64{}
	for k, v := range after {
		n := v[1] - before[k][1]
		if n < least {
			continue
		}
		mean[k], count[k] = 1000*(v[0]-before[k][0])/n, n
	}
	return mean, count
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
