package setup

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// LeaderElectionID names the Lease of the operator replicas' leader
// election.
const LeaderElectionID = "fencedlease-operator"

// ManagerConfig is what a manager of the operator is made of. cmd/manager
// fills it from its flags and test/testenv from a test's options, so that
// both build the same manager. The zero value is a manager with the
// controller and nothing else: no webhooks, metrics endpoint, probes or
// leader election.
type ManagerConfig struct {
	// Controller configures the FencedLease controller.
	Controller Options
	// NoController leaves the controller out: a manager that serves only
	// the webhooks.
	NoController bool
	// ReportProtection makes the controller report FencedLeases in
	// namespaces that the fencing webhook does not cover (Protection),
	// unless Controller.Protection is set already.
	ReportProtection bool

	// Namespace restricts the caches to one namespace; empty: every one.
	Namespace string
	// WholePods caches whole pods instead of the fields the operator reads
	// (costs memory; for comparison).
	WholePods bool

	// Metrics configures the metrics endpoint; a BindAddress of "" or "0"
	// serves none.
	Metrics MetricsOptions
	// HealthProbeBindAddress serves /healthz and /readyz; "" or "0": none.
	HealthProbeBindAddress string
	// PprofBindAddress serves Go's profiles (/debug/pprof/); "" or "0":
	// none, the default.
	PprofBindAddress string
	// Ready is the readiness check; nil: the webhook server has started
	// when Webhooks is set, else always ready.
	Ready healthz.Checker
	// LeaderElection elects one active controller among the replicas, with
	// the Lease LeaderElectionID in LeaderElectionNamespace (empty: the
	// namespace the operator runs in).
	LeaderElection          bool
	LeaderElectionNamespace string

	// WebhookServer is the manager's webhook server; nil: controller-
	// runtime's default, which starts only if a webhook is registered.
	WebhookServer webhook.Server
	// Webhooks serves the admission webhooks on the webhook server.
	Webhooks bool
	// WebhookOptions configure the admission webhooks and name the webhook
	// configurations that ReportProtection checks.
	WebhookOptions WebhookOptions
	// CertDir holds the webhook server's certificate; with Webhooks, its
	// expiry is a metric (RegisterCertificateMetrics). Empty: not reported.
	CertDir string

	// Configure, if set, changes the manager's options last, before the
	// manager is created (tests use it).
	Configure func(*ctrl.Options)
}

// NewManager creates the operator's manager against cfg, with the
// controller, the webhooks and the checks that c asks for, ready to start.
// With Webhooks it writes the webhooks' path token into the webhook
// configurations before it returns (AddWebhooks), so ctx must allow API
// calls.
func NewManager(ctx context.Context, cfg *rest.Config, c ManagerConfig) (ctrl.Manager, error) {
	cacheOpts := CacheOptions()
	if c.WholePods {
		cacheOpts = WholePods(cacheOpts)
	}
	if c.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{c.Namespace: {}}
	}
	metricsOpts := metricsserver.Options{BindAddress: "0"}
	if c.Metrics.BindAddress != "" && c.Metrics.BindAddress != "0" {
		metricsOpts = MetricsServer(c.Metrics)
	}
	if c.Webhooks && c.CertDir != "" {
		if err := RegisterCertificateMetrics(c.CertDir); err != nil {
			return nil, err
		}
	}
	probes := c.HealthProbeBindAddress
	if probes == "" {
		probes = "0"
	}
	opts := ctrl.Options{
		Scheme:                  Scheme(),
		Cache:                   cacheOpts,
		Metrics:                 metricsOpts,
		WebhookServer:           c.WebhookServer,
		HealthProbeBindAddress:  probes,
		PprofBindAddress:        c.PprofBindAddress,
		LeaderElection:          c.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: c.LeaderElectionNamespace,
	}
	if c.Configure != nil {
		c.Configure(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("create the manager: %w", err)
	}
	if !c.NoController {
		controller := c.Controller
		if c.ReportProtection && controller.Protection == nil {
			if controller.Protection, err = Protection(mgr, c.WebhookOptions); err != nil {
				return nil, fmt.Errorf("set up the check of the fencing webhook's coverage: %w", err)
			}
		}
		if err := Add(mgr, controller); err != nil {
			return nil, err
		}
	}
	if c.Webhooks {
		if err := AddWebhooks(ctx, mgr, c.WebhookOptions); err != nil {
			return nil, fmt.Errorf("set up the admission webhooks: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add the health check: %w", err)
	}
	// Not ready until admission through this replica works: the API server
	// calls ready replicas only, and the webhooks fail closed.
	ready := c.Ready
	switch {
	case ready != nil:
	case c.Webhooks:
		ready = mgr.GetWebhookServer().StartedChecker()
	default:
		ready = healthz.Ping
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return nil, fmt.Errorf("add the readiness check: %w", err)
	}
	return mgr, nil
}
