package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/certs"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	f, zapOpts := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	if err := run(f); err != nil {
		log.Error(err, "The operator stopped with an error")
		os.Exit(1)
	}
}

// run checks the flags and the environment, sets up the manager with its
// webhook server, and runs it until a signal stops it.
func run(f flags) error {
	ctx := ctrl.SetupSignalHandler()
	if err := checkFlags(&f); err != nil {
		return fmt.Errorf("check flags: %w", err)
	}
	if err := setMemoryLimit(); err != nil {
		return fmt.Errorf("check the environment: %w", err)
	}
	tlsOpts := tlsOptions(f.enableHTTP2)
	ws, err := newWebhookServing(&f, tlsOpts)
	if err != nil {
		return fmt.Errorf("check flags: %w", err)
	}
	mgr, err := setup.NewManager(ctx, ctrl.GetConfigOrDie(), managerConfig(f, tlsOpts, ws))
	if err != nil {
		return fmt.Errorf("set up the operator: %w", err)
	}
	return start(ctx, mgr, ws.serving)
}

// setMemoryLimit sets the Go runtime's soft memory limit from the
// container's, when the environment gives one.
func setMemoryLimit() error {
	limit, ok, err := setup.SoftMemoryLimit(os.Getenv)
	if err != nil {
		return err
	}
	if ok {
		debug.SetMemoryLimit(limit)
		ctrl.Log.WithName("setup").Info("Set the Go runtime's soft memory limit to 90% of the container's", "bytes", limit)
	}
	return nil
}

// tlsOptions are the TLS settings of the webhook and metrics servers:
// TLS 1.2 at least, and HTTP/1.1 only unless http2.
func tlsOptions(http2 bool) []func(*tls.Config) {
	opts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !http2 {
		opts = append(opts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	return opts
}

// webhookServing is the webhook server and where its certificate comes
// from.
type webhookServing struct {
	server webhook.Server
	// serving loads, and with rotation provisions, the certificate from
	// --webhook-cert-secret; nil without it.
	serving *certs.Certs
	// certDir is the directory of the server's certificate.
	certDir string
}

// newWebhookServing makes the webhook server. With --webhook-cert-secret
// its certificate comes from that Secret, written into the certificate
// directory, and the server answers only once it is loaded.
func newWebhookServing(f *flags, tlsOpts []func(*tls.Config)) (webhookServing, error) {
	opts := webhook.Options{Host: f.webhookHost, Port: f.webhookPort, CertDir: f.webhookCertDir, TLSOpts: tlsOpts}
	if !f.enableWebhooks || f.certs.SecretName == "" {
		return webhookServing{server: webhook.NewServer(opts), certDir: certDirOr(opts.CertDir)}, nil
	}
	// The directory must be known here: the operator writes the
	// certificate into it.
	opts.CertDir = certDirOr(opts.CertDir)
	f.certs.CertDir = opts.CertDir
	serving, err := certs.New(f.certs)
	if err != nil {
		return webhookServing{}, err
	}
	return webhookServing{server: serving.GateServer(webhook.NewServer(opts)), serving: serving, certDir: opts.CertDir}, nil
}

// managerConfig is the operator's configuration from the flags.
func managerConfig(f flags, tlsOpts []func(*tls.Config), ws webhookServing) setup.ManagerConfig {
	var heartbeat *fencedlease.Heartbeat
	if f.heartbeat.Interval > 0 {
		heartbeat = &f.heartbeat
	}
	c := setup.ManagerConfig{
		Controller:              setup.Options{Workers: f.workers, StatusRenewalInterval: f.statusRenewalInterval, Heartbeat: heartbeat},
		ReportProtection:        true,
		WholePods:               f.cacheWholePods,
		Metrics:                 setup.MetricsOptions{BindAddress: f.metricsAddr, Insecure: !f.secureMetrics, CertDir: f.metricsCertDir, TLSOpts: tlsOpts},
		HealthProbeBindAddress:  f.probeAddr,
		PprofBindAddress:        f.pprofAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionNamespace: f.leaderElectionNamespace,
		WebhookServer:           ws.server,
		Webhooks:                f.enableWebhooks,
		WebhookOptions:          f.webhook,
		CertDir:                 ws.certDir,
	}
	if ws.serving != nil {
		c.Ready = ws.serving.ReadyChecker(certs.ServerAddress(f.webhookHost, f.webhookPort))
	}
	return c
}

// start adds the serving certificate's runnables, if any, to mgr and runs
// it until ctx ends.
func start(ctx context.Context, mgr manager.Manager, serving *certs.Certs) error {
	if serving != nil {
		if err := serving.Add(mgr); err != nil {
			return fmt.Errorf("set up the serving certificate: %w", err)
		}
	}
	ctrl.Log.WithName("setup").Info("Starting the operator", "version", version)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run the manager: %w", err)
	}
	return nil
}

// certDirOr is dir, or controller-runtime's default certificate directory
// when dir is empty.
func certDirOr(dir string) string {
	if dir == "" {
		return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	return dir
}
