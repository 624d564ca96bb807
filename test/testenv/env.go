package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencedlease/fencedlease/internal/setup"
)

// Env is a running control plane with the project's CRDs installed.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	// Client is an administrator's client.
	Client client.Client
}

// RepoRoot is the root of the repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// WithWebhooks installs the admission webhook configurations of
// config/webhook, pointed at a local webhook server with a self-signed
// certificate, so that the API server really calls the webhooks over TLS.
// Pass Env.WebhookInstallOptions to StartManager to serve them.
func WithWebhooks() func(*envtest.Environment) {
	return func(te *envtest.Environment) {
		te.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(RepoRoot(), "config", "webhook")},
		}
	}
}

// Start starts kube-apiserver and etcd with the CRDs of config/crd/bases.
// KUBEBUILDER_ASSETS must name the directory of the binaries (make test sets
// it); when it is unset, the version-keyed bin/ directory is used.
func Start(opts ...func(*envtest.Environment)) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		dir := filepath.Join(RepoRoot(), "bin", "k8s", "1.37.2")
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
			return nil, fmt.Errorf("no control-plane binaries in %s: run 'make control-plane' (or 'make test') first", dir)
		}
		os.Setenv("KUBEBUILDER_ASSETS", dir)
	}
	te := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	for _, o := range opts {
		o(te)
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("create client: %w", err)
	}
	return &Env{Environment: te, Config: cfg, Client: c}, nil
}
