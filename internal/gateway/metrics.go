package gateway

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

// Values of the operation label: one per Kind.
var operationNames = map[Kind]string{
	Unsupported: "unsupported", ReadObject: "read", ListBucket: "list",
	PutObject: "put", CopyObject: "copy", DeleteObject: "delete", Invalid: "invalid",
}

// Metrics are the gateway's Prometheus collectors. Every label value comes
// from a fixed set, never from a request, so no request adds a series.
type Metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	conflicts prometheus.Counter
	inFlight  prometheus.Gauge
	grantAge  prometheus.Histogram
	rechecks  prometheus.Counter
	reviews   *prometheus.CounterVec
}

// NewMetrics registers the collectors with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencedlease_gateway_requests_total",
			Help: "Requests to the fence gateway by operation (read, list, put, copy, delete, unsupported, invalid), result (allowed, denied, error) and reason.",
		}, []string{"operation", "result", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencedlease_gateway_request_duration_seconds",
			Help:    "Time the fence gateway takes to serve a request: the API server's and the store's time included, and the transfer of the body.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15),
		}, []string{"operation", "result"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencedlease_gateway_conditional_write_conflicts_total",
			Help: "Conditional writes to the store that failed their ETag precondition (412): another writer changed the object between the gateway's check and its write.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencedlease_gateway_requests_in_flight",
			Help: "Requests the fence gateway is serving now.",
		}),
		grantAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencedlease_gateway_grant_age_at_commit_seconds",
			Help:    "Age of the grant read that admitted a write when the write's last byte went to the store (at most --grant-max-age: an older one is read again).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
		}),
		rechecks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencedlease_gateway_grant_rechecks_total",
			Help: "Writes whose grant was read again before their last byte went to the store, because the first read was older than --grant-max-age.",
		}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencedlease_gateway_token_reviews_total",
			Help: "TokenReviews the fence gateway sent to the API server, by outcome (accepted, rejected, error); tokens answered from memory or over their source's budget send none.",
		}, []string{"outcome"}),
	}
	var err error
	if m.decisions, err = register(reg, m.decisions); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.conflicts, err = register(reg, m.conflicts); err != nil {
		return nil, err
	}
	if m.inFlight, err = register(reg, m.inFlight); err != nil {
		return nil, err
	}
	if m.grantAge, err = register(reg, m.grantAge); err != nil {
		return nil, err
	}
	if m.reviews, err = register(reg, m.reviews); err != nil {
		return nil, err
	}
	if m.rechecks, err = register(reg, m.rechecks); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered before in its
// place (a second server in the same process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *Metrics) observe(k Kind, result string, reason Reason, took time.Duration) {
	if m == nil {
		return
	}
	op := operationNames[k]
	m.decisions.WithLabelValues(op, result, string(reason)).Inc()
	m.duration.WithLabelValues(op, result).Observe(took.Seconds())
}

// Reviewed counts a TokenReview sent, by outcome (accepted, rejected,
// error); nil-safe.
func (m *Metrics) Reviewed(outcome string) {
	if m != nil {
		m.reviews.WithLabelValues(outcome).Inc()
	}
}
