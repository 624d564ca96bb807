package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencedlease/fencedlease/internal/setup"
)

// Manager is an operator running in the test process.
type Manager struct {
	ctrl.Manager
	cancel context.CancelFunc
	// stopped is closed once the manager has stopped; err is then what
	// its Start returned.
	stopped chan struct{}
	err     error
}

// ManagerOptions tune a test manager.
type ManagerOptions struct {
	setup.Options
	// Namespace restricts the caches to one namespace, so that parallel tests
	// do not see each other. Empty watches every namespace.
	Namespace string
	// Configure may change the manager options before it is created.
	Configure func(*ctrl.Options)
	// Register adds more to the manager.
	Register func(ctrl.Manager) error
	// Webhooks, when set, serves the admission webhooks where the API server
	// of the environment calls them (see WithWebhooks).
	Webhooks *envtest.WebhookInstallOptions
	// WebhookOptions configure the admission webhooks.
	WebhookOptions setup.WebhookOptions
	// NoController leaves the FencedLease controller out (webhook-only tests).
	NoController bool
	// MetricsAddress, if set, serves the metrics endpoint there as
	// cmd/manager does: HTTPS, every scrape authenticated and authorized by
	// the API server.
	MetricsAddress string
	// ReportProtection makes the controller report FencedLeases in
	// namespaces that the fencing webhook does not cover, as cmd/manager
	// does; always on when Webhooks is set.
	ReportProtection bool
}

// StartManager starts the operator, as cmd/manager wires it
// (setup.NewManager) but without leader election or probes (and without
// metrics unless MetricsAddress is set), and waits until its caches have
// synced.
func StartManager(ctx context.Context, cfg *rest.Config, o ManagerOptions) (*Manager, error) {
	c := setup.ManagerConfig{
		Controller:       o.Options,
		NoController:     o.NoController,
		ReportProtection: o.ReportProtection || o.Webhooks != nil,
		Namespace:        o.Namespace,
		Metrics:          setup.MetricsOptions{BindAddress: o.MetricsAddress},
		Webhooks:         o.Webhooks != nil,
		WebhookOptions:   o.WebhookOptions,
		Configure: func(opts *ctrl.Options) {
			// Several managers run in one test process.
			skip := true
			opts.Controller = config.Controller{SkipNameValidation: &skip}
			if o.Configure != nil {
				o.Configure(opts)
			}
		},
	}
	if w := o.Webhooks; w != nil {
		c.WebhookServer = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
		if o.MetricsAddress != "" {
			c.CertDir = w.LocalServingCertDir
		}
		// The webhooks' path token lives in the operator's namespace.
		if err := ensureNamespace(ctx, cfg, tokenNamespace(o.WebhookOptions)); err != nil {
			return nil, err
		}
	}
	mgr, err := setup.NewManager(ctx, cfg, c)
	if err != nil {
		return nil, err
	}
	if o.Register != nil {
		if err := o.Register(mgr); err != nil {
			return nil, err
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	m := &Manager{Manager: mgr, cancel: cancel, stopped: make(chan struct{})}
	go func() { m.err = mgr.Start(mctx); close(m.stopped) }()
	if o.Webhooks != nil {
		if err := waitForWebhookServer(ctx, o.Webhooks); err != nil {
			cancel()
			return nil, err
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if !mgr.GetCache().WaitForCacheSync(sctx) {
		cancel()
		return nil, fmt.Errorf("manager caches did not sync")
	}
	return m, nil
}

func tokenNamespace(o setup.WebhookOptions) string {
	if o.TokenSecret.Namespace != "" {
		return o.TokenSecret.Namespace
	}
	return setup.DefaultNamespace
}

// ensureNamespace creates the namespace if it does not exist, as the
// identity of cfg (an administrator can; the operator's own identity may
// only read it, and then the namespace must exist already).
func ensureNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err = c.Get(ctx, client.ObjectKeyFromObject(ns), ns)
	if !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// Stop stops the operator, as a crash or a restart would, and waits for it.
func (m *Manager) Stop() error {
	m.cancel()
	select {
	case <-m.stopped:
		return m.err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("manager did not stop within 30s")
	}
}

// Crash stops the operator without waiting: whatever it was doing fails with
// a cancelled context from now on.
func (m *Manager) Crash() { m.cancel() }

// Wait waits for a crashed operator to finish stopping (at most 30 s); a
// crash ends with whatever error the cancelled context caused. Waiting again,
// or stopping it after, returns at once.
func (m *Manager) Wait() {
	select {
	case <-m.stopped:
	case <-time.After(30 * time.Second):
	}
}

// waitForWebhookServer waits until the webhook server accepts TLS connections.
func waitForWebhookServer(ctx context.Context, w *envtest.WebhookInstallOptions) error {
	addr := net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only checks that the local test server is up
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("webhook server at %s did not come up: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
