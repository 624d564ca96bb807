//go:build apf

package flowcontrol_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// result is a run's record, written as JSON to $APF_OUT.
type result struct {
	Date    string `json:"date"`
	CPUs    int    `json:"cpus"`
	LoadAvg string `json:"loadAvg"`
	// Leases FencedLeases of one ready pod each, plus one of two pods that
	// is handed over in every phase; LeaseSeconds and RenewSeconds are
	// their timing.
	Leases       int `json:"leases"`
	LeaseSeconds int `json:"leaseSeconds"`
	RenewSeconds int `json:"renewSeconds"`
	// Heartbeat is the heartbeat's interval and refresh, or "off": every
	// grant renewed on its own Lease.
	Heartbeat string `json:"heartbeat"`
	// LoadAccounts service accounts of LoadWorkers workers each.
	LoadAccounts int `json:"loadAccounts"`
	LoadWorkers  int `json:"loadWorkers"`
	// LoadAdmissionDelayMs is how long the busy namespace's admission
	// webhook takes for each of its ConfigMap updates (0: none).
	LoadAdmissionDelayMs float64           `json:"loadAdmissionDelayMs"`
	ServerLimits         map[string]string `json:"serverLimits"`
	// Installed names the objects installed for the second phase, and where
	// they were rendered from (chart or kustomize).
	Installed    string        `json:"installed"`
	PhaseSeconds float64       `json:"phaseSeconds"`
	Phases       []phaseResult `json:"phases"`
	// CheckerFailed says that the holder invariants broke (the test fails).
	CheckerFailed bool `json:"checkerFailed"`
}

// phaseResult is what one phase measured.
type phaseResult struct {
	Name       string  `json:"name"`
	FlowSchema string  `json:"flowSchema"`
	Seconds    float64 `json:"seconds"`
	// The operator's requests: all of them, the 429 answers among them,
	// and the latency of its writes of the FencedLeases' Leases (create
	// and update).
	OperatorRequests int     `json:"operatorRequests"`
	OperatorTooMany  int     `json:"operatorTooMany"`
	LeaseWrites      int     `json:"leaseWrites"`
	LeaseWriteP50Ms  float64 `json:"leaseWriteP50Ms"`
	LeaseWriteP99Ms  float64 `json:"leaseWriteP99Ms"`
	LeaseWriteMaxMs  float64 `json:"leaseWriteMaxMs"`
	// The writes of the heartbeat Lease, which renew every grant it vouches
	// for (design.md, "A quiet lease"), and the time between two of its
	// renewals as a watcher sees them.
	HeartbeatWrites           int     `json:"heartbeatWrites"`
	HeartbeatWriteP50Ms       float64 `json:"heartbeatWriteP50Ms"`
	HeartbeatWriteP99Ms       float64 `json:"heartbeatWriteP99Ms"`
	HeartbeatWriteMaxMs       float64 `json:"heartbeatWriteMaxMs"`
	Heartbeats                int     `json:"heartbeats"`
	HeartbeatGapP50Ms         float64 `json:"heartbeatGapP50Ms"`
	HeartbeatGapP99Ms         float64 `json:"heartbeatGapP99Ms"`
	HeartbeatGapMaxMs         float64 `json:"heartbeatGapMaxMs"`
	HeartbeatGapsOverDuration int     `json:"heartbeatGapsOverDuration"`
	// The webhooks' live reads of Leases and FencedLeases.
	WebhookReads      int     `json:"webhookReads"`
	WebhookReadP99Ms  float64 `json:"webhookReadP99Ms"`
	WebhookReadsMaxMs float64 `json:"webhookReadMaxMs"`
	// Renewals of the FencedLeases' own Leases as a watcher sees them: the
	// time between two renewals of a grant, and how many of those gaps
	// exceeded the lease duration (a Lease that looked expired while held).
	// With the heartbeat, a grant's own Lease is renewed only at its
	// refresh (5 minutes): few or none within a phase.
	Renewals         int     `json:"renewals"`
	RenewalGapP50Ms  float64 `json:"renewalGapP50Ms"`
	RenewalGapP99Ms  float64 `json:"renewalGapP99Ms"`
	RenewalGapMaxMs  float64 `json:"renewalGapMaxMs"`
	GapsOverDuration int     `json:"gapsOverDuration"`
	// Grants that changed under a healthy holder: Leases granted again, and
	// the operator's own count of grants that expired while the holder ran.
	Regrants            []string `json:"regrants"`
	ExpiredWhileRunning float64  `json:"expiredWhileRunning"`
	RenewalFailures     float64  `json:"renewalFailures"`
	// The operator's pacing: the highest renewal lateness (0 on time, 1
	// expired), stretch and saturation it reported during the phase.
	MaxRenewalLateness float64 `json:"maxRenewalLateness"`
	MaxRenewalStretch  float64 `json:"maxRenewalStretch"`
	Saturated          bool    `json:"saturated"`
	// HandoffSeconds is the time from the handoff request to the new holder
	// published (takeover Safe: a lease duration of it is the wait); -1 if
	// it did not happen within the phase.
	HandoffSeconds float64 `json:"handoffSeconds"`
	// HolderWrites are the holder pods' writes to protected ConfigMaps.
	HolderWrites holderSummary `json:"holderWrites"`
	// The load's requests: answered, 429 (after client-go's retries), other
	// errors, and per second.
	LoadOK        int64   `json:"loadOK"`
	LoadTooMany   int64   `json:"loadTooMany"`
	LoadFailed    int64   `json:"loadFailed"`
	LoadPerSecond float64 `json:"loadPerSecond"`
	// Levels is the API server's priority and fairness per priority level.
	Levels map[string]levelStats `json:"levels"`
}

type holderSummary struct {
	Admitted      int      `json:"admitted"`
	Denied        int      `json:"denied"`
	WebhookFailed int      `json:"webhookFailed"`
	Other         int      `json:"other"`
	NotHolder     int      `json:"notHolder"`
	P50Ms         float64  `json:"p50Ms"`
	P99Ms         float64  `json:"p99Ms"`
	MaxMs         float64  `json:"maxMs"`
	Errors        []string `json:"errors,omitempty"`
}

// quantile is the q-quantile of sorted durations (0 if none).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// machine fills in when and where the run ran.
func (r *result) machine() {
	r.Date = time.Now().UTC().Format(time.RFC3339)
	r.CPUs = runtime.NumCPU()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
}

// log writes the phases side by side.
func (r *result) log(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%d FencedLeases (%ds, renewed every %ds, heartbeat %s), load of %d service accounts x %d workers (admission %.0f ms), API server %v, %d CPUs, load average %s\n",
		r.Leases, r.LeaseSeconds, r.RenewSeconds, r.Heartbeat, r.LoadAccounts, r.LoadWorkers, r.LoadAdmissionDelayMs, r.ServerLimits, r.CPUs, r.LoadAvg)
	row := func(name string, f func(p phaseResult) string) {
		fmt.Fprintf(&b, "  %-42s", name)
		for _, p := range r.Phases {
			fmt.Fprintf(&b, " %-28s", f(p))
		}
		b.WriteString("\n")
	}
	row("phase", func(p phaseResult) string { return p.Name })
	row("operator classified by", func(p phaseResult) string { return p.FlowSchema })
	row("operator requests (429)", func(p phaseResult) string { return fmt.Sprintf("%d (%d)", p.OperatorRequests, p.OperatorTooMany) })
	row("grant Lease writes p50 / p99 / max ms", func(p phaseResult) string {
		return fmt.Sprintf("%d: %.0f / %.0f / %.0f", p.LeaseWrites, p.LeaseWriteP50Ms, p.LeaseWriteP99Ms, p.LeaseWriteMaxMs)
	})
	row("heartbeat writes p50 / p99 / max ms", func(p phaseResult) string {
		return fmt.Sprintf("%d: %.0f / %.0f / %.0f", p.HeartbeatWrites, p.HeartbeatWriteP50Ms, p.HeartbeatWriteP99Ms, p.HeartbeatWriteMaxMs)
	})
	row("heartbeat gaps p50 / p99 / max ms", func(p phaseResult) string {
		return fmt.Sprintf("%d: %.0f / %.0f / %.0f", p.Heartbeats, p.HeartbeatGapP50Ms, p.HeartbeatGapP99Ms, p.HeartbeatGapMaxMs)
	})
	row("heartbeat gaps > lease duration", func(p phaseResult) string { return fmt.Sprint(p.HeartbeatGapsOverDuration) })
	row("webhook reads p99 / max ms", func(p phaseResult) string {
		return fmt.Sprintf("%d: %.0f / %.0f", p.WebhookReads, p.WebhookReadP99Ms, p.WebhookReadsMaxMs)
	})
	row("grant Lease renewal gaps p50/p99/max ms", func(p phaseResult) string {
		return fmt.Sprintf("%d: %.0f / %.0f / %.0f", p.Renewals, p.RenewalGapP50Ms, p.RenewalGapP99Ms, p.RenewalGapMaxMs)
	})
	row("gaps > lease duration", func(p phaseResult) string { return fmt.Sprint(p.GapsOverDuration) })
	row("grants changed / expired while running", func(p phaseResult) string {
		return fmt.Sprintf("%d / %.0f", len(p.Regrants), p.ExpiredWhileRunning)
	})
	row("renewal failures", func(p phaseResult) string { return fmt.Sprintf("%.0f", p.RenewalFailures) })
	row("max lateness / stretch / saturated", func(p phaseResult) string {
		return fmt.Sprintf("%.2f / %.2f / %v", p.MaxRenewalLateness, p.MaxRenewalStretch, p.Saturated)
	})
	row("handoff s", func(p phaseResult) string { return fmt.Sprintf("%.1f", p.HandoffSeconds) })
	row("holder writes ok/denied/hookfail/other/none", func(p phaseResult) string {
		h := p.HolderWrites
		return fmt.Sprintf("%d/%d/%d/%d/%d", h.Admitted, h.Denied, h.WebhookFailed, h.Other, h.NotHolder)
	})
	row("holder writes p50 / p99 ms", func(p phaseResult) string {
		return fmt.Sprintf("%.0f / %.0f", p.HolderWrites.P50Ms, p.HolderWrites.P99Ms)
	})
	row("load req/s (429, failed)", func(p phaseResult) string {
		return fmt.Sprintf("%.0f (%d, %d)", p.LoadPerSecond, p.LoadTooMany, p.LoadFailed)
	})
	for _, level := range []string{"workload-low", "fencedlease-operator"} {
		row(level+" queued / mean wait ms", func(p phaseResult) string {
			l := p.Levels[level]
			return fmt.Sprintf("%.0f / %.1f", l.Queued, l.MeanWaitMs)
		})
		row(level+" seats nominal / current", func(p phaseResult) string {
			l := p.Levels[level]
			return fmt.Sprintf("%.0f / %.0f", l.NominalSeats, l.CurrentSeats)
		})
	}
	t.Log("\n" + b.String())
}
