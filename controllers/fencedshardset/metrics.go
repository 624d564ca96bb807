package fencedshardset

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The controller's Prometheus series, on controller-runtime's registry,
// labelled by the set's namespace and name: their number is bounded by the
// number of sets, never by shards, pods or fences. A set's series go when
// the set is deleted.
var (
	setLabels = []string{"namespace", "name"}

	shardsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencedlease_shardset_shards",
		Help: "Shards of the FencedShardSet (spec.shards, or the number of spec.keys).",
	}, setLabels)
	ownedGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencedlease_shardset_shards_owned",
		Help: "Shards whose grant is committed to an eligible pod (status.owned).",
	}, setLabels)
	podsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencedlease_shardset_pods_eligible",
		Help: "Candidate pods that may own shards (status.pods).",
	}, setLabels)
	unownedSinceGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencedlease_shardset_oldest_unowned_since_timestamp_seconds",
		Help: "Unix time since which the shard longest without owner has been so, as this operator saw it (from when it first saw it so); 0 while every shard is owned.",
	}, setLabels)
	leaseDurationGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencedlease_shardset_lease_duration_seconds",
		Help: "spec.leaseDurationSeconds of the FencedShardSet, for alerts that compare times with it.",
	}, setLabels)
	grantsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencedlease_shardset_grants_total",
		Help: "Shard grants written by this operator: each gives a shard a new, higher fence (first grants and moves).",
	}, setLabels)

	registerOnce sync.Once
)

// registerMetrics adds the collectors to controller-runtime's registry,
// once per process (tests start many managers).
func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(shardsGauge, ownedGauge, podsGauge, unownedSinceGauge, leaseDurationGauge, grantsTotal)
	})
}

// unownedSince remembers, per set and shard, since when the shard has had
// no owner, as this process saw it: a shard's own time, so that a rolling
// update, which leaves some shard or other unowned for minutes but each
// for one handoff, does not look like one shard unowned all along.
type unownedSince struct {
	mu    sync.Mutex
	since map[string]map[string]time.Time // by namespace/name of the set, then shard
}

// observe records which shards of the set are unowned now and returns since
// when the longest unowned of them has been so; zero when none is.
func (u *unownedSince) observe(set string, unowned []string, now time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(unowned) == 0 {
		delete(u.since, set)
		return time.Time{}
	}
	if u.since == nil {
		u.since = map[string]map[string]time.Time{}
	}
	was := u.since[set]
	current := make(map[string]time.Time, len(unowned))
	oldest := now
	for _, key := range unowned {
		at, ok := was[key]
		if !ok {
			at = now
		}
		current[key] = at
		if at.Before(oldest) {
			oldest = at
		}
	}
	u.since[set] = current
	return oldest
}

func (u *unownedSince) forget(set string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.since, set)
}

// recordMetrics sets the set's series from its status.
func (r *Reconciler) recordMetrics(s *scope, unowned []string) {
	set := s.set
	lv := []string{set.Namespace, set.Name}
	st := set.Status
	shardsGauge.WithLabelValues(lv...).Set(float64(st.Shards))
	ownedGauge.WithLabelValues(lv...).Set(float64(st.Owned))
	podsGauge.WithLabelValues(lv...).Set(float64(st.Pods))
	leaseDurationGauge.WithLabelValues(lv...).Set(leaseDuration(set).Seconds())
	since := r.unowned.observe(client.ObjectKeyFromObject(set).String(), unowned, s.now)
	if since.IsZero() {
		unownedSinceGauge.WithLabelValues(lv...).Set(0)
	} else {
		unownedSinceGauge.WithLabelValues(lv...).Set(float64(since.Unix()))
	}
	grantsTotal.WithLabelValues(lv...).Add(float64(s.moved))
}

// forgetMetrics deletes the series of a set that is gone.
func (r *Reconciler) forgetMetrics(set types.NamespacedName) {
	lv := []string{set.Namespace, set.Name}
	for _, v := range []*prometheus.GaugeVec{shardsGauge, ownedGauge, podsGauge, unownedSinceGauge, leaseDurationGauge} {
		v.DeleteLabelValues(lv...)
	}
	grantsTotal.DeleteLabelValues(lv...)
	r.unowned.forget(set.String())
}
