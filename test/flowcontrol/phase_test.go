//go:build apf

package flowcontrol_test

import (
	"context"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// phase is one measured phase: its record, and what the assertions need.
type phase struct {
	res phaseResult
	// want is where the operator's requests should have been classified.
	want classification
	// controller and webhooks are the operator's requests.
	controller, webhooks []request
	// fencesBefore and fencesAfter are the FencedLeases' fences, but the
	// handoff one's.
	fencesBefore, fencesAfter map[string]int64
	leaseWatchBroken          bool
}

// phase runs the load for warmup, then measures for phaseLen: the holders
// write their protected ConfigMaps, and a third in, the handoff FencedLease
// is handed over.
func (r *run) phase(name string, want classification) phase {
	g := NewWithT(r.t)
	r.t.Logf("phase %s: load of %d service accounts for %s, then %s measured", name, len(r.busy.clients), warmup, r.phaseLen)
	r.busy.start(r.ctx)
	defer r.busy.stop()
	time.Sleep(warmup)

	p := phase{want: want, fencesBefore: r.fences()}
	opBefore, err := operatorMetrics()
	g.Expect(err).NotTo(HaveOccurred())
	apiBefore, err := apiServerMetrics(r.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	r.ctrlRec.reset()
	r.hookRec.reset()
	r.leases.reset()
	if r.heartbeat != nil {
		r.heartbeat.reset()
	}
	r.busy.counts()
	start := time.Now()

	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	writes := &holderWrites{}
	for _, w := range r.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, r.admin, writeInterval, writes)
		}()
	}
	// The operator's pacing gauges, at their highest.
	var lateness, stretch, saturated float64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if fams, err := operatorMetrics(); err == nil {
				v, _ := testenv.Sample(fams, "fencedlease_renewal_lateness", nil)
				lateness = max(lateness, v)
				v, _ = testenv.Sample(fams, "fencedlease_renewal_stretch", nil)
				stretch = max(stretch, v)
				v, _ = testenv.Sample(fams, "fencedlease_operator_saturated", nil)
				saturated = max(saturated, v)
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	handoff := make(chan float64, 1)
	go func() {
		select {
		case <-ctx.Done():
			handoff <- -1
		case <-time.After(r.phaseLen / 3):
			handoff <- r.handoff(ctx)
		}
	}()
	time.Sleep(r.phaseLen)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()

	loadOK, loadTooMany, loadFailed := r.busy.counts()
	p.controller, p.webhooks = r.ctrlRec.requests(), r.hookRec.requests()
	gaps, regrants, broken := r.leases.read(handoffLease)
	p.leaseWatchBroken = broken
	opAfter, err := operatorMetrics()
	g.Expect(err).NotTo(HaveOccurred())
	apiAfter, err := apiServerMetrics(r.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	p.fencesAfter = r.fences()

	isHeartbeat := func(q request) bool { return strings.HasSuffix(q.path, "/leases/"+fencedlease.DefaultHeartbeatName) }
	leaseWrites := latencies(p.controller, func(q request) bool { return ofKind("update leases", "create leases")(q) && !isHeartbeat(q) })
	heartbeatWrites := latencies(p.controller, func(q request) bool { return q.kind == "update leases" && isHeartbeat(q) })
	hookReads := latencies(p.webhooks, ofKind("get leases", "get fencedleases"))
	var beats []time.Duration
	if r.heartbeat != nil {
		var broken bool
		beats, _, broken = r.heartbeat.read("")
		p.leaseWatchBroken = p.leaseWatchBroken || broken
	}
	p.res = phaseResult{
		Name: name, FlowSchema: want.flowSchema, Seconds: elapsed.Seconds(),
		OperatorRequests: len(p.controller) + len(p.webhooks), OperatorTooMany: tooMany(p.controller) + tooMany(p.webhooks),
		LeaseWrites: len(leaseWrites), LeaseWriteP50Ms: ms(quantile(leaseWrites, 0.5)), LeaseWriteP99Ms: ms(quantile(leaseWrites, 0.99)), LeaseWriteMaxMs: ms(quantile(leaseWrites, 1)),
		HeartbeatWrites: len(heartbeatWrites), HeartbeatWriteP50Ms: ms(quantile(heartbeatWrites, 0.5)), HeartbeatWriteP99Ms: ms(quantile(heartbeatWrites, 0.99)),
		HeartbeatWriteMaxMs: ms(quantile(heartbeatWrites, 1)),
		Heartbeats:          len(beats), HeartbeatGapP50Ms: ms(quantile(beats, 0.5)), HeartbeatGapP99Ms: ms(quantile(beats, 0.99)), HeartbeatGapMaxMs: ms(quantile(beats, 1)),
		HeartbeatGapsOverDuration: longer(beats, leaseSeconds*time.Second),
		WebhookReads:              len(hookReads), WebhookReadP99Ms: ms(quantile(hookReads, 0.99)), WebhookReadsMaxMs: ms(quantile(hookReads, 1)),
		Renewals: len(gaps), RenewalGapP50Ms: ms(quantile(gaps, 0.5)), RenewalGapP99Ms: ms(quantile(gaps, 0.99)), RenewalGapMaxMs: ms(quantile(gaps, 1)),
		GapsOverDuration: longer(gaps, leaseSeconds*time.Second), Regrants: regrants,
		ExpiredWhileRunning: delta(opBefore, opAfter, "fencedlease_expired_while_running_total", nil),
		RenewalFailures:     delta(opBefore, opAfter, "fencedlease_renewal_failures_total", nil),
		MaxRenewalLateness:  lateness, MaxRenewalStretch: stretch, Saturated: saturated > 0,
		HandoffSeconds: <-handoff,
		HolderWrites:   writes.summary(),
		LoadOK:         loadOK, LoadTooMany: loadTooMany, LoadFailed: loadFailed, LoadPerSecond: float64(loadOK) / elapsed.Seconds(),
		Levels: map[string]levelStats{},
	}
	for _, level := range []string{"workload-low", "fencedlease-operator", "global-default", "workload-high"} {
		p.res.Levels[level] = levelDelta(apiBefore, apiAfter, level)
	}
	return p
}

// longer counts the durations longer than d.
func longer(ds []time.Duration, d time.Duration) int {
	n := 0
	for _, x := range ds {
		if x > d {
			n++
		}
	}
	return n
}
