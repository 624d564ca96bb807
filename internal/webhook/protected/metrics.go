package protected

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// Values of the result label.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

// Reasons of requests that fail before a decision (the reason label of an
// error result).
const (
	reasonBadRequest = "bad_request"
	reasonReadError  = "lease_read_error"
	reasonGuardError = "scale_guard_error"
)

// Values of the resource label: "configmaps", "secrets", another resource
// that the webhook's configuration lists as resource[.group][/subresource],
// and resourceOther for anything else (refused): label values never come
// from a request beyond what the configuration lists.
const (
	resourceConfigMaps = "configmaps"
	resourceSecrets    = "secrets"
	resourceOther      = "other"
)

// labelSets are every (result, reason) pair a request can end with. All
// series of the default resources exist from the start, so no request,
// whatever it carries, adds one; a resource the configuration adds gets its
// series at its first request.
var labelSets = func() [][2]string {
	var out [][2]string
	for _, r := range []fencing.Reason{fencing.ReasonUnprotected, fencing.ReasonOperator, fencing.ReasonBreakGlass, fencing.ReasonSystemCleanup, fencing.ReasonHolder} {
		out = append(out, [2]string{resultAllowed, string(r)})
	}
	for _, r := range []fencing.Reason{fencing.ReasonLabelChanged, fencing.ReasonSubresourceMetadata, fencing.ReasonOwnerUnprotected, fencing.ReasonInvalidLabel, fencing.ReasonMissingFence, fencing.ReasonMalformedFence,
		fencing.ReasonObjectFenceRegression, fencing.ReasonStaleFence, fencing.ReasonUnknownFence, fencing.ReasonLeaseNotFound, fencing.ReasonUnknownShard, fencing.ReasonNoHolder,
		fencing.ReasonNotHolder, fencing.ReasonWriteNotPod, fencing.ReasonDeleteNotPod, fencing.ReasonDeleteOlderWrite} {
		out = append(out, [2]string{resultDenied, string(r)})
	}
	return append(out, [2]string{resultError, reasonBadRequest}, [2]string{resultError, reasonReadError}, [2]string{resultError, reasonGuardError})
}()

var resources = []string{resourceConfigMaps, resourceSecrets, resourceOther}

// resourceLabel is the resource label of a request.
func resourceLabel(req admission.Request, listed []coverage.Resource) string {
	if !coverage.Covers(listed, req.Resource.Group, req.Resource.Resource, req.SubResource) {
		return resourceOther
	}
	return coverage.Resource{Group: req.Resource.Group, Resource: req.Resource.Resource, SubResource: req.SubResource}.String()
}

// handlerMetrics are the webhook's Prometheus collectors.
type handlerMetrics struct {
	decisions       *prometheus.CounterVec
	dryRunDecisions *prometheus.CounterVec
	duration        *prometheus.HistogramVec
}

// observe counts a decision: a dry run apart, so that it is never taken for
// a write (an alert on stale holders does not fire on kubectl diff).
func (m *handlerMetrics) observe(resource, result, reason string, dryRun bool, took time.Duration) {
	if dryRun {
		m.dryRunDecisions.WithLabelValues(resource, result, reason).Inc()
		return
	}
	m.decisions.WithLabelValues(resource, result, reason).Inc()
	m.duration.WithLabelValues(resource, result).Observe(took.Seconds())
}

// newMetrics registers the collectors, or reuses those registered by an
// earlier webhook in the same process (a manager restarted in tests), and
// creates every series.
func newMetrics(reg prometheus.Registerer) (*handlerMetrics, error) {
	labels := []string{"resource", "result", "reason"}
	decisions, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencedlease_webhook_decisions_total",
		Help: "Admission decisions of the fencing webhook on writes to protected objects, by resource (configmaps, secrets, another resource the webhook's configuration lists as resource[.group][/subresource], other), result (allowed, denied, error) and reason. Dry runs are not counted here.",
	}, labels))
	if err != nil {
		return nil, err
	}
	dryRun, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencedlease_webhook_dry_run_decisions_total",
		Help: "Admission decisions of the fencing webhook on dry-run writes (kubectl --dry-run=server, kubectl diff), which change nothing; labels as fencedlease_webhook_decisions_total.",
	}, labels))
	if err != nil {
		return nil, err
	}
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencedlease_webhook_duration_seconds",
		Help:    "Time the fencing webhook takes to decide an admission request that is not a dry run, including a FencedLease read from the API server when the cache may lag.",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15),
	}, []string{"resource", "result"}))
	if err != nil {
		return nil, err
	}
	for _, resource := range resources {
		for _, l := range labelSets {
			decisions.WithLabelValues(resource, l[0], l[1])
			dryRun.WithLabelValues(resource, l[0], l[1])
		}
		for _, result := range []string{resultAllowed, resultDenied, resultError} {
			duration.WithLabelValues(resource, result)
		}
	}
	return &handlerMetrics{decisions: decisions, dryRunDecisions: dryRun, duration: duration}, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &already):
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register fencing webhook metrics: %w", err)
}
