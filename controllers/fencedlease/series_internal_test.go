package fencedlease

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// recordLook records one reconcile of the FencedLease ns/name with outcome
// o, holding fence when fence > 0.
func recordLook(r *Reconciler, name string, fence int64, o outcome) {
	fl := &fencingv1alpha1.FencedLease{}
	fl.Namespace, fl.Name = "ns", name
	fl.Spec.LeaseDurationSeconds = 7
	fl.Status.Fence, fl.Status.Candidates = fence, 2
	if fence > 0 {
		fl.Status.Holder = &fencingv1alpha1.HolderRef{}
	}
	r.recordMetrics(&scope{key: types.NamespacedName{Namespace: "ns", Name: name}, fl: fl, outcome: o})
}

// TestSeriesAreServedFromMemoryAndGoWithIt: the series of a FencedLease say
// what its reconciles recorded (counters add up, gauges show the last look,
// a cause or mode gets its series when first seen), a stale look records
// nothing, and forgetting the FencedLease drops its series and no other's.
func TestSeriesAreServedFromMemoryAndGoWithIt(t *testing.T) {
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(time.Unix(100, 0)), PendingGrace: time.Second}
	r.mem = newMemories(r.Clock)
	c := &leaseCollector{sources: map[*memories]struct{}{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.serve(ctx, r.mem); close(done) }()
	defer func() { cancel(); <-done }()
	waitForSources(t, c, 1)

	recordLook(r, "a", 0, outcome{waiting: true})
	recordLook(r, "a", 41, outcome{granted: true})
	recordLook(r, "a", 41, outcome{renewed: "Operator"})
	recordLook(r, "a", 41, outcome{renewed: "Operator"})
	recordLook(r, "a", 0, outcome{ended: holder.CauseNotReady, heldFor: time.Second})
	recordLook(r, "a", 57, outcome{granted: true})
	recordLook(r, "b", 0, outcome{regression: true})
	stale := &scope{key: types.NamespacedName{Namespace: "ns", Name: "c"}, fl: &fencingv1alpha1.FencedLease{}, next: stale}
	r.recordMetrics(stale)

	want := `
# HELP fencedlease_grants_total Grants committed: each one hands a new, higher fence to a pod.
# TYPE fencedlease_grants_total counter
fencedlease_grants_total{name="a",namespace="ns"} 2
fencedlease_grants_total{name="b",namespace="ns"} 0
# HELP fencedlease_fence The fence of the current (or, without a holder, the last) grant, as the status records it.
# TYPE fencedlease_fence gauge
fencedlease_fence{name="a",namespace="ns"} 57
fencedlease_fence{name="b",namespace="ns"} 0
# HELP fencedlease_holder 1 while a pod holds a committed grant, 0 otherwise.
# TYPE fencedlease_holder gauge
fencedlease_holder{name="a",namespace="ns"} 1
fencedlease_holder{name="b",namespace="ns"} 0
# HELP fencedlease_fence_regressions_total Grants refused because the API server handed out a resourceVersion not greater than a fence already published (a restored storage).
# TYPE fencedlease_fence_regressions_total counter
fencedlease_fence_regressions_total{name="a",namespace="ns"} 0
fencedlease_fence_regressions_total{name="b",namespace="ns"} 1
# HELP fencedlease_lease_duration_seconds spec.leaseDurationSeconds, for alerts that compare times with it.
# TYPE fencedlease_lease_duration_seconds gauge
fencedlease_lease_duration_seconds{name="a",namespace="ns"} 7
fencedlease_lease_duration_seconds{name="b",namespace="ns"} 7
`
	names := []string{"fencedlease_grants_total", "fencedlease_fence", "fencedlease_holder", "fencedlease_fence_regressions_total",
		"fencedlease_lease_duration_seconds"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	handoffs := `
# HELP fencedlease_handoffs_total ` + "Committed grants that ended, by cause: " + strings.Join(holder.Causes, ", ") + "." + `
# TYPE fencedlease_handoffs_total counter
fencedlease_handoffs_total{cause="not_ready",name="a",namespace="ns"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(handoffs), "fencedlease_handoffs_total"); err != nil {
		t.Fatal(err)
	}
	renewals := `
# HELP fencedlease_renewals_total Renewals of the current grant: written by the operator (mode Operator) or seen written by the holder (mode Holder).
# TYPE fencedlease_renewals_total counter
fencedlease_renewals_total{mode="Operator",name="a",namespace="ns"} 2
fencedlease_renewals_total{mode="Operator",name="b",namespace="ns"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(renewals), "fencedlease_renewals_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "fencedlease_last_renewal_timestamp_seconds"); n != 1 {
		t.Errorf("%d last-renewal series, want 1 (b was never granted nor renewed)", n)
	}

	r.mem.forget(types.NamespacedName{Namespace: "ns", Name: "a"})
	if n := testutil.CollectAndCount(c, "fencedlease_grants_total"); n != 1 {
		t.Errorf("%d grants series after a is forgotten, want 1 (b's)", n)
	}
	if n := testutil.CollectAndCount(c, "fencedlease_handoffs_total"); n != 0 {
		t.Errorf("%d handoff series after a is forgotten, want 0", n)
	}
}

// TestSeriesOfStoppedReconcilersGo: a manager that stops takes its series
// with it; a FencedLease remembered by two managers of one process is
// served once (a registry refuses a series collected twice).
func TestSeriesOfStoppedReconcilersGo(t *testing.T) {
	c := &leaseCollector{sources: map[*memories]struct{}{}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	var cancels []context.CancelFunc
	var dones []chan struct{}
	for range 2 {
		r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(time.Unix(100, 0)), PendingGrace: time.Second}
		r.mem = newMemories(r.Clock)
		recordLook(r, "a", 9, outcome{granted: true})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.serve(ctx, r.mem); close(done) }()
		cancels, dones = append(cancels, cancel), append(dones, done)
	}
	waitForSources(t, c, 2)
	if n, err := testutil.GatherAndCount(reg, "fencedlease_grants_total"); err != nil || n != 1 {
		t.Fatalf("two managers remembering ns/a: %d series, %v; want one, no error", n, err)
	}
	for i := range cancels {
		cancels[i]()
		<-dones[i]
	}
	if n, err := testutil.GatherAndCount(reg, "fencedlease_grants_total"); err != nil || n != 0 {
		t.Fatalf("after both managers stopped: %d series, %v; want none", n, err)
	}
}

func waitForSources(t *testing.T, c *leaseCollector, n int) {
	t.Helper()
	for range 1000 {
		c.mu.Lock()
		got := len(c.sources)
		c.mu.Unlock()
		if got == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the collector never had %d sources", n)
}

// BenchmarkSeriesMemory: the heap that the series of 10,000 held
// FencedLeases take (their memories included), per FencedLease.
func BenchmarkSeriesMemory(b *testing.B) {
	for range b.N {
		r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(time.Unix(100, 0)), PendingGrace: time.Second}
		r.mem = newMemories(r.Clock)
		before := heapInUse()
		for i := range 10000 {
			name := fmt.Sprintf("lease-%05d", i)
			recordLook(r, name, int64(i+1), outcome{granted: true})
			recordLook(r, name, int64(i+1), outcome{renewed: "Operator"})
		}
		b.ReportMetric(float64(heapInUse()-before)/10000, "B/lease")
		for i := range 10000 {
			r.mem.forget(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("lease-%05d", i)})
		}
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkSeriesScrape: one scrape of the series of 10,000 held
// FencedLeases (the garbage it makes is B/op).
func BenchmarkSeriesScrape(b *testing.B) {
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(time.Unix(100, 0)), PendingGrace: time.Second}
	r.mem = newMemories(r.Clock)
	for i := range 10000 {
		name := fmt.Sprintf("lease-%05d", i)
		recordLook(r, name, int64(i+1), outcome{granted: true})
		recordLook(r, name, int64(i+1), outcome{renewed: "Operator"})
	}
	c := &leaseCollector{sources: map[*memories]struct{}{r.mem: {}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
