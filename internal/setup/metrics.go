package setup

import (
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencedlease/fencedlease/internal/certs"
)

// The metrics endpoint authenticates every scrape with a TokenReview and
// authorizes it with a SubjectAccessReview (get on the non-resource URL
// /metrics): the operator needs to create both.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// MetricsOptions configure the metrics endpoint.
type MetricsOptions struct {
	// BindAddress is where it listens; "0" turns it off.
	BindAddress string
	// Insecure serves plain HTTP without authentication, for a run on a
	// workstation only.
	Insecure bool
	// CertDir holds tls.crt and tls.key; empty: a self-signed certificate
	// generated at start.
	CertDir string
	// TLSOpts tune the TLS configuration (minimum version, HTTP/2).
	TLSOpts []func(*tls.Config)
}

// MetricsServer returns the options of the manager's metrics endpoint: HTTPS,
// and every scrape authenticated and authorized by the API server, so that
// only identities granted get on /metrics (the metrics-reader ClusterRole)
// read it. cmd/manager and the tests use the same options.
func MetricsServer(o MetricsOptions) metricsserver.Options {
	if o.Insecure {
		return metricsserver.Options{BindAddress: o.BindAddress}
	}
	return metricsserver.Options{
		BindAddress:    o.BindAddress,
		SecureServing:  true,
		CertDir:        o.CertDir,
		TLSOpts:        o.TLSOpts,
		FilterProvider: metricsAuth,
	}
}

// RegisterCertificateMetrics reports the expiry of the webhook server's
// certificate, read from certDir at every scrape. A second call (a manager
// restarted in the same process) keeps the first collector.
func RegisterCertificateMetrics(certDir string) error {
	err := metrics.Registry.Register(certs.ExpiryCollector{Name: "webhook", File: filepath.Join(certDir, certs.CertName)})
	var already prometheus.AlreadyRegisteredError
	if err != nil && !errors.As(err, &already) {
		return fmt.Errorf("register the certificate metrics: %w", err)
	}
	return nil
}
