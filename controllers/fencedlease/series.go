package fencedlease

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
)

// leaseSeries are the values of one FencedLease's series (metrics.go), kept
// in its memory; leaseCollector turns them into series when scraped.
type leaseSeries struct {
	// recorded is set once a reconcile recorded them: a memory made for
	// another reason has no series.
	recorded bool
	// The counters.
	grants, expiredWhileRunning, regressions float64
	handoffs, renewals, renewalFailures      labelledCounts
	// The gauges.
	fence                                   int64
	candidates                              int32
	holder, paused                          bool
	holderSince, lastRenewal, leaseDuration float64
}

// labelledCounts are the counts of a counter with one more label, in the
// order its values were first seen (a cause, a renewal mode: a few values).
type labelledCounts []labelledCount

type labelledCount struct {
	value string
	n     float64
}

// add adds n to the count of value, creating it at n.
func (lc *labelledCounts) add(value string, n float64) {
	for i := range *lc {
		if (*lc)[i].value == value {
			(*lc)[i].n += n
			return
		}
	}
	*lc = append(*lc, labelledCount{value: value, n: n})
}

// leaseCollector serves the series of every FencedLease of the processes'
// reconcilers (one in a manager; tests run several in one process), from
// their memories, when the metrics endpoint is scraped.
type leaseCollector struct {
	mu      sync.Mutex
	sources map[*memories]struct{}
}

// leases is the collector registered on controller-runtime's registry.
var leases = &leaseCollector{sources: map[*memories]struct{}{}}

// serve adds m's series to the collector until ctx ends.
func (c *leaseCollector) serve(ctx context.Context, m *memories) {
	c.mu.Lock()
	c.sources[m] = struct{}{}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	delete(c.sources, m)
	c.mu.Unlock()
}

// seriesRunner serves a reconciler's series while its manager runs, on
// every replica (a replica that is not the leader remembers nothing).
type seriesRunner struct{ m *memories }

func (s seriesRunner) Start(ctx context.Context) error {
	leases.serve(ctx, s.m)
	return nil
}

func (seriesRunner) NeedLeaderElection() bool { return false }

// Describe implements prometheus.Collector.
func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{grantsDesc, handoffsDesc, expiredWhileRunningDesc, renewalsDesc, renewalFailuresDesc,
		fenceRegressionsDesc, fenceDesc, candidatesDesc, holderDesc, holderSinceDesc, lastRenewalDesc, pausedDesc, leaseDurationDesc} {
		ch <- d
	}
}

// keyedSeries is a copy of a FencedLease's series, taken under its lock.
type keyedSeries struct {
	key types.NamespacedName
	leaseSeries
}

// Collect implements prometheus.Collector: it copies the series of every
// source under the source's lock, and sends them without it, so that a
// scrape holds up the reconciles for no longer than the copy. A FencedLease
// in two sources (two managers of one test process) is served once.
func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	var all []keyedSeries
	for m := range c.sources {
		all = m.appendSeries(all)
	}
	c.mu.Unlock()
	seen := make(map[types.NamespacedName]bool, len(all))
	for _, ks := range all {
		if seen[ks.key] {
			continue
		}
		seen[ks.key] = true
		ks.send(ch)
	}
}

// appendSeries appends a copy of the recorded series of each FencedLease
// remembered.
func (m *memories) appendSeries(all []keyedSeries) []keyedSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, tr := range m.tracks {
		ls := tr.series
		if !ls.recorded {
			continue
		}
		ls.handoffs = append(labelledCounts(nil), ls.handoffs...)
		ls.renewals = append(labelledCounts(nil), ls.renewals...)
		ls.renewalFailures = append(labelledCounts(nil), ls.renewalFailures...)
		all = append(all, keyedSeries{key: key, leaseSeries: ls})
	}
	return all
}

// send sends the series of one FencedLease. Its label pairs are made once
// and shared by its series (a scrape of ten thousand FencedLeases makes
// 120,000 of them).
func (ks *keyedSeries) send(ch chan<- prometheus.Metric) {
	labels := leaseLabelPairs(ks.key)
	one := func(d *prometheus.Desc, counter bool, v float64) {
		ch <- leaseMetric{desc: d, counter: counter, value: v, labels: labels}
	}
	more := func(d *prometheus.Desc, name string, lcs labelledCounts) {
		for _, lc := range lcs {
			ch <- leaseMetric{desc: d, counter: true, value: lc.n, labels: withLabel(labels, name, lc.value)}
		}
	}
	one(grantsDesc, true, ks.grants)
	one(expiredWhileRunningDesc, true, ks.expiredWhileRunning)
	one(fenceRegressionsDesc, true, ks.regressions)
	more(handoffsDesc, "cause", ks.handoffs)
	more(renewalsDesc, "mode", ks.renewals)
	more(renewalFailuresDesc, "mode", ks.renewalFailures)
	one(fenceDesc, false, float64(ks.fence))
	one(candidatesDesc, false, float64(ks.candidates))
	one(holderDesc, false, boolValue(ks.holder))
	one(pausedDesc, false, boolValue(ks.paused))
	one(holderSinceDesc, false, ks.holderSince)
	if ks.lastRenewal != 0 {
		one(lastRenewalDesc, false, ks.lastRenewal)
	}
	one(leaseDurationDesc, false, ks.leaseDuration)
}

// leaseMetric is one series of a FencedLease, as a scrape sees it.
type leaseMetric struct {
	desc    *prometheus.Desc
	counter bool
	value   float64
	// labels are sorted by name, as a scrape expects them.
	labels []*dto.LabelPair
}

func (m leaseMetric) Desc() *prometheus.Desc { return m.desc }

func (m leaseMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	v := m.value
	if m.counter {
		out.Counter = &dto.Counter{Value: &v}
	} else {
		out.Gauge = &dto.Gauge{Value: &v}
	}
	return nil
}

var nameLabel, namespaceLabel = "name", "namespace"

// leaseLabelPairs are the label pairs of key's series, sorted.
func leaseLabelPairs(key types.NamespacedName) []*dto.LabelPair {
	name, ns := key.Name, key.Namespace
	return []*dto.LabelPair{{Name: &nameLabel, Value: &name}, {Name: &namespaceLabel, Value: &ns}}
}

// withLabel is labels with name=value added; name sorts before "name"
// (cause, mode).
func withLabel(labels []*dto.LabelPair, name, value string) []*dto.LabelPair {
	return append([]*dto.LabelPair{{Name: &name, Value: &value}}, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
