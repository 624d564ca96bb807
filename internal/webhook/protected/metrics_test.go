package protected_test

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencedlease/fencedlease/test/harness"
)

// decisions sums fencedlease_webhook_decisions_total over the series whose
// labels include every given label (none: all series).
func decisions(labels map[string]string) float64 {
	return harness.Value(metrics.Registry, "fencedlease_webhook_decisions_total", labels)
}

// handlerTime is the total count and sum of fencedlease_webhook_duration_seconds.
func handlerTime() (uint64, float64) {
	families, err := harness.Gather(metrics.Registry)
	if err != nil {
		panic(err)
	}
	n, _ := harness.Sample(families, "fencedlease_webhook_duration_seconds", nil)
	return uint64(n), harness.HistogramSum(families, "fencedlease_webhook_duration_seconds", nil)
}

// gauge is the value of a gauge without labels, -1 when there is none.
func gauge(name string) float64 {
	families, err := harness.Gather(metrics.Registry)
	if err != nil {
		panic(err)
	}
	if v, ok := harness.Sample(families, name, nil); ok && len(families[name].GetMetric()) == 1 {
		return v
	}
	return -1
}
