package rulecheck

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
	"sigs.k8s.io/yaml"
)

// alertExprs are the expressions of the rendered PrometheusRule, by alert.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	spec, err := yaml.Marshal(one(t, render(t), "PrometheusRule", "fencedlease-alerts")["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	out := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// firing evaluates an alert's expression at a time over the series loaded
// (promqltest's load syntax: samples every 15s from time 0) and returns the
// namespace/name of the leases it fires for.
func firing(t *testing.T, expr, load string, at time.Duration) []string {
	t.Helper()
	storage := promqltest.LoadedStorage(t, load)
	defer storage.Close()
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1_000_000)
	q, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, time.Unix(0, 0).Add(at))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	vec, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range vec {
		out = append(out, s.Metric.Get("namespace")+"/"+s.Metric.Get("name"))
	}
	return out
}

func equal(a []string, b ...string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAlertsFireWhenTheyShould evaluates the lease alerts over series shaped
// like the operator's: the timestamp series hold Unix seconds (here, seconds
// since the start of the load), compared with the time of their own scrape.
func TestAlertsFireWhenTheyShould(t *testing.T) {
	exprs := alertExprs(t)
	// Lease a/db has had no holder since time 0; a/paused neither, but it is
	// paused; a/held has a holder. Lease duration 15s; N is 3.
	noHolder := `load 15s
  fencedlease_holder{namespace="a", name="db"} 0x20
  fencedlease_holder{namespace="a", name="paused"} 0x20
  fencedlease_holder{namespace="a", name="held"} 1x20
  fencedlease_paused{namespace="a", name="db"} 0x20
  fencedlease_paused{namespace="a", name="paused"} 1x20
  fencedlease_paused{namespace="a", name="held"} 0x20
  fencedlease_holder_state_since_timestamp_seconds{namespace="a", name="db"} 0x20
  fencedlease_holder_state_since_timestamp_seconds{namespace="a", name="paused"} 0x20
  fencedlease_holder_state_since_timestamp_seconds{namespace="a", name="held"} 0x20
  fencedlease_lease_duration_seconds{namespace="a", name="db"} 15x20
  fencedlease_lease_duration_seconds{namespace="a", name="paused"} 15x20
  fencedlease_lease_duration_seconds{namespace="a", name="held"} 15x20
`
	if got := firing(t, exprs["FencedLeaseNoHolder"], noHolder, 45*time.Second); len(got) != 0 {
		t.Errorf("FencedLeaseNoHolder at 3 lease durations: %v, want nothing yet", got)
	}
	if got := firing(t, exprs["FencedLeaseNoHolder"], noHolder, 60*time.Second); !equal(got, "a/db") {
		t.Errorf("FencedLeaseNoHolder at 4 lease durations: %v, want a/db alone (a/paused is paused, a/held is held)", got)
	}

	// Set a/stuck has had a shard unowned since time 1s; in set a/rolling a
	// shard or other is unowned all along, each for 15s (the gauge is the
	// longest unowned shard's time); a/owned has every shard owned. Lease
	// duration 15s; N is 3.
	unowned := `load 15s
  fencedlease_shardset_oldest_unowned_since_timestamp_seconds{namespace="a", name="stuck"} 1x20
  fencedlease_shardset_oldest_unowned_since_timestamp_seconds{namespace="a", name="rolling"} 0+15x20
  fencedlease_shardset_oldest_unowned_since_timestamp_seconds{namespace="a", name="owned"} 0x20
  fencedlease_shardset_lease_duration_seconds{namespace="a", name="stuck"} 15x20
  fencedlease_shardset_lease_duration_seconds{namespace="a", name="rolling"} 15x20
  fencedlease_shardset_lease_duration_seconds{namespace="a", name="owned"} 15x20
`
	if got := firing(t, exprs["FencedShardSetUnowned"], unowned, 45*time.Second); len(got) != 0 {
		t.Errorf("FencedShardSetUnowned at 3 lease durations: %v, want nothing yet", got)
	}
	if got := firing(t, exprs["FencedShardSetUnowned"], unowned, 60*time.Second); !equal(got, "a/stuck") {
		t.Errorf("FencedShardSetUnowned at 4 lease durations: %v, want a/stuck alone (a/rolling's shards move one at a time, a/owned's are owned)", got)
	}

	// a/late was last renewed at 0; a/fine is renewed at every scrape.
	renewals := `load 15s
  fencedlease_holder{namespace="a", name="late"} 1x20
  fencedlease_holder{namespace="a", name="fine"} 1x20
  fencedlease_last_renewal_timestamp_seconds{namespace="a", name="late"} 0x20
  fencedlease_last_renewal_timestamp_seconds{namespace="a", name="fine"} 0+15x20
  fencedlease_lease_duration_seconds{namespace="a", name="late"} 20x20
  fencedlease_lease_duration_seconds{namespace="a", name="fine"} 20x20
`
	if got := firing(t, exprs["FencedLeaseRenewalLate"], renewals, 15*time.Second); len(got) != 0 {
		t.Errorf("FencedLeaseRenewalLate with a renewal 15s old (of 20s): %v, want nothing", got)
	}
	if got := firing(t, exprs["FencedLeaseRenewalLate"], renewals, 30*time.Second); !equal(got, "a/late") {
		t.Errorf("FencedLeaseRenewalLate with a renewal 30s old: %v, want a/late alone", got)
	}

	// Two operator replicas; the leader is saturated from the third scrape
	// to the fifth, the other never (it reconciles nothing).
	saturated := `load 1m
  fencedlease_operator_saturated{pod="op-1"} 0 0 1 1 1 0 0
  fencedlease_operator_saturated{pod="op-2"} 0 0 0 0 0 0 0
`
	if got := firing(t, exprs["FencedLeaseOperatorSaturated"], saturated, time.Minute); len(got) != 0 {
		t.Errorf("FencedLeaseOperatorSaturated before saturation: %v, want nothing", got)
	}
	if got := firing(t, exprs["FencedLeaseOperatorSaturated"], saturated, 3*time.Minute); len(got) != 1 {
		t.Errorf("FencedLeaseOperatorSaturated while the leader is saturated: %v, want one alert", got)
	}
	if got := firing(t, exprs["FencedLeaseOperatorSaturated"], saturated, 6*time.Minute); len(got) != 0 {
		t.Errorf("FencedLeaseOperatorSaturated after saturation: %v, want nothing", got)
	}

	counters := `load 1m
  fencedlease_renewal_failures_total{namespace="a", name="db", mode="Operator"} 0 0 1 2 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3
  fencedlease_fence_regressions_total{namespace="a", name="db"} 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
  fencedlease_expired_while_running_total{namespace="a", name="db"} 0 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
`
	if got := firing(t, exprs["FencedLeaseRenewalFailures"], counters, 5*time.Minute); !equal(got, "a/db") {
		t.Errorf("FencedLeaseRenewalFailures after 3 failures: %v", got)
	}
	if got := firing(t, exprs["FencedLeaseRenewalFailures"], counters, 20*time.Minute); len(got) != 0 {
		t.Errorf("FencedLeaseRenewalFailures ten minutes after the last failure: %v", got)
	}
	if got := firing(t, exprs["FencedLeaseFenceRegression"], counters, 5*time.Minute); !equal(got, "a/db") {
		t.Errorf("FencedLeaseFenceRegression: %v", got)
	}
	if got := firing(t, exprs["FencedLeaseExpiredWhileRunning"], counters, 6*time.Minute); !equal(got, "a/db") {
		t.Errorf("FencedLeaseExpiredWhileRunning: %v", got)
	}
}
