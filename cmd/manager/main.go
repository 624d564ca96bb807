package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type flags struct {
	metricsAddr, probeAddr     string
	leaderElect                bool
	leaderElectionNamespace    string
	webhookPort                int
	webhookCertDir             string
	enableHTTP2, secureMetrics bool
	enableWebhooks             bool
	webhook                    setup.WebhookOptions
	tokenSecret                string
}

func parseFlags() (flags, zap.Options) {
	var f flags
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; \"0\" turns it off.")
	flag.BoolVar(&f.secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS with authentication and authorization by the API server.")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.BoolVar(&f.leaderElect, "leader-elect", true, "Elect one active controller among the replicas. Correctness does not depend on it: every grant is a compare-and-swap.")
	flag.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; defaults to the operator's namespace.")
	flag.IntVar(&f.webhookPort, "webhook-port", 9443, "Port of the admission webhook server.")
	flag.StringVar(&f.webhookCertDir, "webhook-cert-dir", "", "Directory with tls.crt and tls.key for the webhook server; defaults to controller-runtime's.")
	flag.BoolVar(&f.enableHTTP2, "enable-http2", false, "Serve the webhook and metrics over HTTP/2 as well (off because of HTTP/2 rapid-reset attacks).")
	flag.BoolVar(&f.enableWebhooks, "enable-webhooks", true, "Serve the admission webhooks (fencing of protected ConfigMaps and Secrets, token injection into pods).")
	flag.Func("operator-user", "User name the operator authenticates as (repeatable), e.g. system:serviceaccount:fencedlease-system:fencedlease-controller-manager; it may write protected objects.", appendTo(&f.webhook.OperatorUsers))
	flag.Func("break-glass-user", "User allowed to write protected objects without a token (repeatable); every such write is logged, recorded as an Event and counted.", appendTo(&f.webhook.BreakGlassUsers))
	flag.Func("break-glass-group", "Group allowed to write protected objects without a token (repeatable); audited like --break-glass-user.", appendTo(&f.webhook.BreakGlassGroups))
	flag.StringVar(&f.tokenSecret, "webhook-token-secret", defaultNamespace()+"/"+setup.DefaultTokenSecret,
		"Secret (namespace/name, in the operator's namespace) that keeps the random token in the webhooks' paths; created if missing. The webhooks are served only under <path>/<token>.")
	flag.StringVar(&f.webhook.FencingConfiguration, "fencing-webhook-configuration", setup.DefaultFencingConfiguration,
		"ValidatingWebhookConfiguration of the fencing webhook: its path gets the token, and FencedLeases in namespaces it does not cover report Degraded (ProtectionUnavailable).")
	flag.StringVar(&f.webhook.PodConfiguration, "pod-webhook-configuration", setup.DefaultPodConfiguration,
		"MutatingWebhookConfiguration of the pod webhook: its path gets the token.")
	flag.Int64Var(&f.webhook.MaxRequestBytes, "webhook-max-request-bytes", endpoint.DefaultMaxRequestBytes,
		"Largest admission request body the webhooks read; larger ones are refused unread.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	return f, opts
}

// defaultNamespace is the operator's namespace: $POD_NAMESPACE (set from the
// downward API), or the namespace of the default install.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return setup.DefaultNamespace
}

// parseSecret parses namespace/name.
func parseSecret(v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--webhook-token-secret=%q: want namespace/name", v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

func appendTo(list *[]string) func(string) error {
	return func(v string) error {
		*list = append(*list, v)
		return nil
	}
}

func main() {
	f, zapOpts := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	ctx := ctrl.SetupSignalHandler()
	var err error
	if f.webhook.TokenSecret, err = parseSecret(f.tokenSecret); err != nil {
		log.Error(err, "Bad flag")
		os.Exit(2)
	}

	var tlsOpts []func(*tls.Config)
	tlsOpts = append(tlsOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 })
	if !f.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme: setup.Scheme(),
		Cache:  setup.CacheOptions(),
		Metrics: metricsserver.Options{
			BindAddress:   f.metricsAddr,
			SecureServing: f.secureMetrics,
			TLSOpts:       tlsOpts,
		},
		WebhookServer: webhook.NewServer(webhook.Options{
			Port:    f.webhookPort,
			CertDir: f.webhookCertDir,
			TLSOpts: tlsOpts,
		}),
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "fencedlease-operator",
		LeaderElectionNamespace: f.leaderElectionNamespace,
	})
	if err != nil {
		log.Error(err, "Cannot create the manager")
		os.Exit(1)
	}
	protection, err := setup.Protection(mgr, f.webhook)
	if err != nil {
		log.Error(err, "Cannot set up the check of the fencing webhook's coverage")
		os.Exit(1)
	}
	if err := setup.Add(mgr, setup.Options{Protection: protection}); err != nil {
		log.Error(err, "Cannot set up the operator")
		os.Exit(1)
	}
	if f.enableWebhooks {
		if err := setup.AddWebhooks(ctx, mgr, f.webhook); err != nil {
			log.Error(err, "Cannot set up the admission webhooks")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Cannot add the health check")
		os.Exit(1)
	}
	readyz := healthz.Ping
	if f.enableWebhooks {
		// Not ready until the webhook server serves: the API server calls
		// ready replicas only, and the webhooks fail closed.
		readyz = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		log.Error(err, "Cannot add the readiness check")
		os.Exit(1)
	}
	log.Info("Starting the operator", "version", version)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "The operator stopped with an error")
		os.Exit(1)
	}
}
