//go:build apf

package flowcontrol_test

import (
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencedlease/fencedlease/test/testenv"
)

type families = map[string]*dto.MetricFamily

// operatorMetrics gathers the operator's series from controller-runtime's
// registry: the managers run in the test process.
func operatorMetrics() (families, error) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather the operator's metrics: %w", err)
	}
	out := families{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, nil
}

// apiServerMetrics scrapes the API server's /metrics as the administrator.
func apiServerMetrics(ctx context.Context) (families, error) {
	return testenv.APIServerMetrics(ctx, env.Config)
}

// delta is the change of a counter (or of a histogram's count) between two
// scrapes, summed over the series with the labels.
func delta(before, after families, name string, labels map[string]string) float64 {
	a, _ := testenv.Sample(after, name, labels)
	b, _ := testenv.Sample(before, name, labels)
	return a - b
}

// histogramSum is the sum of a histogram's observations over the series
// with the labels.
func histogramSum(fams families, name string, labels map[string]string) float64 {
	var sum float64
series:
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if v, want := labels[l.GetName()]; want && v != l.GetValue() {
				continue series
			}
		}
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

// levelStats is what the API server's priority and fairness did for one
// priority level during a phase.
type levelStats struct {
	// Dispatched requests, Rejected ones (429), and Queued ones: those that
	// found no free seat and waited in a queue.
	Dispatched, Rejected, Queued float64
	// MeanWaitMs is the mean time a dispatched request waited for a seat.
	MeanWaitMs float64
	// NominalSeats and CurrentSeats are the level's seats: its share of the
	// server's limit, and what borrowing made of it at the phase's end.
	NominalSeats, CurrentSeats float64
}

func levelDelta(before, after families, level string) levelStats {
	pl := map[string]string{"priority_level": level}
	exec := map[string]string{"priority_level": level, "execute": "true"}
	s := levelStats{
		Dispatched: delta(before, after, "apiserver_flowcontrol_dispatched_requests_total", pl),
		Rejected:   delta(before, after, "apiserver_flowcontrol_rejected_requests_total", pl),
		Queued:     delta(before, after, "apiserver_flowcontrol_request_queue_length_after_enqueue", pl),
	}
	if n := delta(before, after, "apiserver_flowcontrol_request_wait_duration_seconds", exec); n > 0 {
		wait := histogramSum(after, "apiserver_flowcontrol_request_wait_duration_seconds", exec) -
			histogramSum(before, "apiserver_flowcontrol_request_wait_duration_seconds", exec)
		s.MeanWaitMs = wait / n * 1000
	}
	s.NominalSeats, _ = testenv.Sample(after, "apiserver_flowcontrol_nominal_limit_seats", pl)
	s.CurrentSeats, _ = testenv.Sample(after, "apiserver_flowcontrol_current_limit_seats", pl)
	return s
}
