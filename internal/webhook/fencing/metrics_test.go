package fencing_test

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// decisions sums fencedlease_webhook_decisions_total over the series whose
// labels include every given label (none: all series).
func decisions(labels map[string]string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != "fencedlease_webhook_decisions_total" {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// handlerTime is the total count and sum of fencedlease_webhook_duration_seconds.
func handlerTime() (uint64, float64) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	var n uint64
	var sum float64
	for _, mf := range families {
		if mf.GetName() != "fencedlease_webhook_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return n, sum
}
