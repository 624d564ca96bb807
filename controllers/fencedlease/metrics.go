package fencedlease

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// The controller's Prometheus series, on controller-runtime's registry (the
// manager's metrics endpoint). The series of one FencedLease are labelled by
// its namespace and name, and at most by one more label with a fixed set of
// values (cause, mode): their number is bounded by the number of
// FencedLeases, never by pods or fences. They are not kept as series: their
// values are a few numbers in the FencedLease's memory (leaseSeries), turned
// into series when the endpoint is scraped (leaseCollector), and gone with
// the memory when the FencedLease is deleted. A series kept in a metric
// vector costs about half a kilobyte; twelve of them for each of ten
// thousand FencedLeases were a tenth of the operator's memory. The two
// histograms are labelled by takeover mode only: a histogram per FencedLease
// would cost a series per bucket; the per-lease story is told by the
// counters and the timestamps. handoffs_total gets a series for a cause
// when that cause first ends a grant of the FencedLease, not ten at once.
var (
	leaseLabels = []string{"namespace", "name"}

	grantsDesc = prometheus.NewDesc("fencedlease_grants_total",
		"Grants committed: each one hands a new, higher fence to a pod.", leaseLabels, nil)
	handoffsDesc = prometheus.NewDesc("fencedlease_handoffs_total",
		"Committed grants that ended, by cause: "+strings.Join(holder.Causes, ", ")+".", append(leaseLabels, "cause"), nil)
	expiredWhileRunningDesc = prometheus.NewDesc("fencedlease_expired_while_running_total",
		"Grants that expired while their holder pod still looked healthy (containers ready): renewals were not confirmed in time, by the operator (cause expired) or by the holder itself (cause holder_stopped_renewing).", leaseLabels, nil)
	renewalsDesc = prometheus.NewDesc("fencedlease_renewals_total",
		"Renewals of the current grant: written by the operator (mode Operator) or seen written by the holder (mode Holder).", append(leaseLabels, "mode"), nil)
	renewalFailuresDesc = prometheus.NewDesc("fencedlease_renewal_failures_total",
		"Renewals that failed: a renewal write of the operator that the API server did not accept (mode Operator), or a holder that did not renew within a lease duration (mode Holder).", append(leaseLabels, "mode"), nil)
	fenceRegressionsDesc = prometheus.NewDesc("fencedlease_fence_regressions_total",
		"Grants refused because the API server handed out a resourceVersion not greater than a fence already published (a restored storage).", leaseLabels, nil)
	fenceDesc = prometheus.NewDesc("fencedlease_fence",
		"The fence of the current (or, without a holder, the last) grant, as the status records it.", leaseLabels, nil)
	candidatesDesc = prometheus.NewDesc("fencedlease_candidates_eligible",
		"Candidate pods that may hold the lease.", leaseLabels, nil)
	holderDesc = prometheus.NewDesc("fencedlease_holder",
		"1 while a pod holds a committed grant, 0 otherwise.", leaseLabels, nil)
	holderSinceDesc = prometheus.NewDesc("fencedlease_holder_state_since_timestamp_seconds",
		"Unix time at which fencedlease_holder last changed (or the operator first saw the FencedLease).", leaseLabels, nil)
	lastRenewalDesc = prometheus.NewDesc("fencedlease_last_renewal_timestamp_seconds",
		"Unix time at which the operator last saw the current grant written or renewed.", leaseLabels, nil)
	pausedDesc = prometheus.NewDesc("fencedlease_paused",
		"1 while spec.paused is set (nothing new is granted), 0 otherwise.", leaseLabels, nil)
	leaseDurationDesc = prometheus.NewDesc("fencedlease_lease_duration_seconds",
		"spec.leaseDurationSeconds, for alerts that compare times with it.", leaseLabels, nil)

	heartbeatsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencedlease_heartbeats_total",
		Help: "Renewals of the operator's heartbeat Lease by this process: each renews every grant of renewal Operator the heartbeat vouches for.",
	})
	heartbeatFailuresTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencedlease_heartbeat_failures_total",
		Help: "Renewals of the operator's heartbeat Lease that failed. Grants it vouches for expire a lease duration after its last renewal.",
	})
	acquisitionWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencedlease_acquisition_wait_seconds",
		Help:    "Time from when an eligible candidate was waiting for the lease (no valid holder) to the commit of its grant, on the operator's clock. Under takeover Safe it includes the wait for the old grant to expire.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300},
	}, []string{"takeover"})
	holdDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencedlease_hold_duration_seconds",
		Help:    "How long committed grants lasted, from when the operator first saw them to their end.",
		Buckets: []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 7 * 24 * 3600},
	}, []string{"takeover"})

	// The operator's renewal pace (internal/pace), one series each.
	renewalShareGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencedlease_renewal_worker_share",
		Help: "Share of the reconcile workers' time that keeping held grants alive took, over about the last 10 s (0 to 1). Above 0.5 renew intervals are stretched.",
	})
	renewalStretchGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencedlease_renewal_stretch",
		Help: "How far renew intervals are stretched: 0 renews every spec renew interval, 1 as late as leaseDuration minus renewInterval after the last renewal.",
	})
	saturatedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencedlease_operator_saturated",
		Help: "1 while the operator admits no first grant, to keep a margin for the renewals of the grants it holds: new FencedLeases wait (Held=False, WaitingForCapacity).",
	})
	firstGrantRateGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencedlease_first_grant_rate",
		Help: "First grants per second the operator admits at most; it halves each time admission closes and grows back while it is open.",
	})
	renewalLatenessGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencedlease_renewal_lateness",
		Help: "How far into its slack (0 on time, 1 expired) the latest renewals ran, the highest over about the last 10 s. Above 0.25 no first grant is admitted.",
	})

	// stepSeconds is where a reconcile's time goes, step by step: with
	// the API server's round trip and the work queue's wait beside it, it
	// tells what a takeover waits for (docs/benchmarks.md, "Failover").
	stepSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencedlease_reconcile_step_seconds",
		Help: "Time the steps of a FencedLease reconcile took, by step (" + strings.Join(stepNames[:], ", ") +
			") and by the action of its plan (Grant, Renew, Revoke, Drop, Wait; None when the plan was not made).",
		Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
	}, []string{"step", "action"})

	registerOnce sync.Once
)

// step is a step of a reconcile whose time is measured (stepSeconds).
type step int

const (
	// stepInputs reads the Lease, creating it if missing, and the pods.
	stepInputs step = iota
	// stepLease decides the plan and writes the Lease.
	stepLease
	// stepPods brings the pods in line with the grant.
	stepPods
	// stepStatus records the status and publishes a grant committed by
	// the reconcile.
	stepStatus
	stepCount
)

var stepNames = [stepCount]string{"inputs", "lease", "pods", "status"}

// observeSteps records the time of each step the reconcile ran.
func observeSteps(s *scope) {
	action := string(s.plan.Action)
	if action == "" {
		action = "None"
	}
	for i, d := range s.took {
		if d > 0 {
			stepSeconds.WithLabelValues(stepNames[i], action).Observe(d.Seconds())
		}
	}
}

// registerMetrics adds the controller's collectors to controller-runtime's
// registry, once per process (tests start many managers).
func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(leases, acquisitionWait, holdDuration, renewalShareGauge, renewalStretchGauge,
			saturatedGauge, firstGrantRateGauge, renewalLatenessGauge, heartbeatsTotal, heartbeatFailuresTotal, stepSeconds)
	})
}

// outcome is what one reconcile did that the metrics count. The steps of
// the reconcile fill it in; recordMetrics turns it into series at the end,
// so that no decision depends on a metric.
type outcome struct {
	// renewed and renewFailed are the renewal mode of a renewal confirmed or
	// failed.
	renewed, renewFailed string
	// granted is set when a grant was committed.
	granted bool
	// ended is the cause of a committed grant that ended; heldFor is how
	// long it lasted.
	ended   string
	heldFor time.Duration
	// regression is set when a grant was refused for a fence regression.
	regression bool
	// waiting says that an eligible candidate waits for the lease.
	waiting bool
}

// leaseTrack is what the metrics need of a FencedLease across reconciles
// (part of its memory): since when a candidate waits, the last holder
// state, and the values of its series.
type leaseTrack struct {
	waitingSince time.Time
	holder       *bool
	series       leaseSeries
}

// recordMetrics turns the outcome of one reconcile, and the status it
// recorded, into the values of the FencedLease's series and observations of
// the histograms.
func (r *Reconciler) recordMetrics(s *scope) {
	if s.next == stale {
		return
	}
	now := r.Clock.Now()
	o := s.outcome
	p := policyOf(s.fl, r.PendingGrace)
	takeover := string(p.Takeover)
	if o.ended != "" {
		holdDuration.WithLabelValues(takeover).Observe(o.heldFor.Seconds())
	}
	r.mem.mu.Lock()
	defer r.mem.mu.Unlock()
	tr := r.mem.track(s.key)
	ls := &tr.series
	ls.recorded = true
	// The counters of the mode exist at 0 from the first look, so that
	// rate() and increase() see their first increment.
	ls.renewals.add(p.Renewal, 0)
	ls.renewalFailures.add(p.Renewal, 0)
	if o.renewed != "" {
		ls.renewals.add(o.renewed, 1)
		ls.lastRenewal = unixSeconds(time.Now())
	}
	if o.renewFailed != "" {
		ls.renewalFailures.add(o.renewFailed, 1)
	}
	if o.ended != "" {
		ls.handoffs.add(o.ended, 1)
		if holder.ExpiredWhileRunning(o.ended) {
			ls.expiredWhileRunning++
		}
	}
	if o.regression {
		ls.regressions++
	}
	switch {
	case o.granted:
		ls.grants++
		ls.lastRenewal = unixSeconds(time.Now())
		if !tr.waitingSince.IsZero() {
			acquisitionWait.WithLabelValues(takeover).Observe(now.Sub(tr.waitingSince).Seconds())
		} else {
			acquisitionWait.WithLabelValues(takeover).Observe(0)
		}
		tr.waitingSince = time.Time{}
	case o.waiting && tr.waitingSince.IsZero():
		tr.waitingSince = now
	case !o.waiting:
		tr.waitingSince = time.Time{}
	}
	held := s.fl.Status.Holder != nil
	if tr.holder == nil || *tr.holder != held {
		tr.holder = &held
		ls.holderSince = unixSeconds(time.Now())
	}
	ls.holder = held
	ls.fence = s.fl.Status.Fence
	ls.candidates = s.fl.Status.Candidates
	ls.paused = s.fl.Spec.Paused
	ls.leaseDuration = p.LeaseDuration.Seconds()
}

// waitingForLease says whether the plan leaves an eligible candidate waiting
// for the lease: nobody holds a valid grant, or the grant is ending.
func waitingForLease(s *scope) bool {
	if s.pods == nil || holder.CountEligible(s.pods.candidates) == 0 {
		return false
	}
	switch {
	case s.plan.Action == holder.Grant || s.plan.Action == holder.Revoke:
		return true
	case s.plan.Waiting == holder.WaitingForExpiry || s.plan.Waiting == holder.WaitingGranting:
		return true
	}
	return false
}

// unixSeconds is a wall-clock time for a timestamp series: Prometheus
// compares it with time(), on its own clock; the operator's decisions never
// use it.
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
