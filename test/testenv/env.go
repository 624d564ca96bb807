package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
)

// Env is a running control plane with the project's CRDs installed.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	// Client is an administrator's client.
	Client client.Client
}

// RepoRoot is the root of the repository.
func RepoRoot() string { return harness.RepoRoot() }

// InstallPrefix is what both installs put before the names of config/'s
// objects with their defaults: config/default's namePrefix, and the chart's
// release name fencedlease. The operator's defaults name the webhook
// configurations so (setup.DefaultFencingConfiguration).
const InstallPrefix = "fencedlease-"

// WithWebhooks installs the admission webhook configurations of
// config/webhook, named as the installs name them (InstallPrefix) and
// pointed at a local webhook server with a self-signed certificate, so that
// the API server really calls the webhooks over TLS. Pass
// Env.WebhookInstallOptions to StartManager to serve them. It panics when
// config/webhook cannot be read: every test of the package would fail.
func WithWebhooks() func(*envtest.Environment) {
	return func(te *envtest.Environment) {
		validating, mutating, err := webhookConfigurations(filepath.Join(RepoRoot(), "config", "webhook"))
		if err != nil {
			panic(err)
		}
		te.WebhookInstallOptions = envtest.WebhookInstallOptions{ValidatingWebhooks: validating, MutatingWebhooks: mutating}
	}
}

// webhookConfigurations reads the webhook configurations of the YAML files
// in dir, each named with InstallPrefix.
func webhookConfigurations(dir string) ([]*admissionregistrationv1.ValidatingWebhookConfiguration, []*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, err
		}
		for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", file, err)
			}
			switch meta.Kind {
			case "ValidatingWebhookConfiguration":
				c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
				if err := yaml.UnmarshalStrict([]byte(doc), c); err != nil {
					return nil, nil, fmt.Errorf("%s: %w", file, err)
				}
				c.Name = InstallPrefix + c.Name
				validating = append(validating, c)
			case "MutatingWebhookConfiguration":
				c := &admissionregistrationv1.MutatingWebhookConfiguration{}
				if err := yaml.UnmarshalStrict([]byte(doc), c); err != nil {
					return nil, nil, fmt.Errorf("%s: %w", file, err)
				}
				c.Name = InstallPrefix + c.Name
				mutating = append(mutating, c)
			}
		}
	}
	if len(validating) == 0 || len(mutating) == 0 {
		return nil, nil, fmt.Errorf("%s: want validating and mutating webhook configurations, found %d and %d", dir, len(validating), len(mutating))
	}
	return validating, mutating, nil
}

// WithExistingCluster runs on a control plane that is already running (an HA
// one of test/cluster) instead of starting one: the CRDs, and the webhooks
// with WithWebhooks, are installed into it through cfg, an administrator's
// configuration. Stop then leaves it running.
func WithExistingCluster(cfg *rest.Config) func(*envtest.Environment) {
	return func(te *envtest.Environment) {
		existing := true
		te.UseExistingCluster = &existing
		te.Config = cfg
	}
}

// WithAPIServerFlags sets flags of the kube-apiserver that envtest starts,
// by name without the leading dashes: its concurrency limits, for a test of
// API Priority and Fairness that must saturate them on a small machine.
func WithAPIServerFlags(flags map[string]string) func(*envtest.Environment) {
	return func(te *envtest.Environment) {
		args := te.ControlPlane.GetAPIServer().Configure()
		for k, v := range flags {
			args.Set(k, v)
		}
	}
}

// Start starts kube-apiserver and etcd with the CRDs of config/crd/bases.
// KUBEBUILDER_ASSETS names the directory of the binaries (make test sets
// it); when it is unset, bin/k8s/<K8S_VERSION of hack/versions.env> is
// used (harness.ControlPlaneDir).
func Start(opts ...func(*envtest.Environment)) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		dir := harness.ControlPlaneDir()
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
		// envtest leaves kube-apiserver and etcd running when a step after
		// their start fails (the CRDs or the webhooks not installed): stop
		// them, or they idle on as long as the machine runs.
		if stopErr := te.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop the control plane: %w", stopErr))
		}
		return nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("create client: %w", err)
	}
	return &Env{Environment: te, Config: cfg, Client: c}, nil
}
