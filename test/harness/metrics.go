package harness

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Gather reads the metric families of g (a registry, such as
// controller-runtime's metrics.Registry that the operator in the test
// process registers with), by name.
func Gather(g prometheus.Gatherer) (map[string]*dto.MetricFamily, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	out := make(map[string]*dto.MetricFamily, len(families))
	for _, mf := range families {
		out[mf.GetName()] = mf
	}
	return out, nil
}

// Sample sums the series of the metric name whose labels include every
// given label (none: all series): the counter, the gauge or the histogram's
// count of observations. It is false when no series matches.
func Sample(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	var sum float64
	found := false
	for _, m := range matching(families, name, labels) {
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

// HistogramSum is the sum of the observations of the histogram name over
// its series whose labels include every given label.
func HistogramSum(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var sum float64
	for _, m := range matching(families, name, labels) {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

// Value is Sample of what g gathers now, 0 when no series matches. It
// panics when g fails: a registry that cannot be read breaks every metric
// check of the test.
func Value(g prometheus.Gatherer, name string, labels map[string]string) float64 {
	families, err := Gather(g)
	if err != nil {
		panic(err)
	}
	v, _ := Sample(families, name, labels)
	return v
}

func matching(families map[string]*dto.MetricFamily, name string, labels map[string]string) []*dto.Metric {
	var out []*dto.Metric
series:
	for _, m := range families[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got, ok := have[k]; !ok || got != v {
				continue series
			}
		}
		out = append(out, m)
	}
	return out
}
