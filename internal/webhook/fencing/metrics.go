package fencing

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
)

// handlerMetrics are the webhook's Prometheus collectors.
type handlerMetrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// newMetrics registers the collectors, or reuses those registered by an
// earlier webhook in the same process (a manager restarted in tests).
func newMetrics(reg prometheus.Registerer) (*handlerMetrics, error) {
	decisions, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencedlease_webhook_decisions_total",
		Help: "Admission decisions of the fencing webhook on protected ConfigMaps and Secrets, by resource, result (allowed, denied, error) and reason.",
	}, []string{"resource", "result", "reason"}))
	if err != nil {
		return nil, err
	}
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencedlease_webhook_duration_seconds",
		Help:    "Time the fencing webhook takes to decide an admission request, including a FencedLease read from the API server when the cache may lag.",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15),
	}, []string{"resource", "result"}))
	if err != nil {
		return nil, err
	}
	return &handlerMetrics{decisions: decisions, duration: duration}, nil
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
