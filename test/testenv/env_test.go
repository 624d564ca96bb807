package testenv

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencedlease/fencedlease/internal/setup"
)

// TestWebhookConfigurationsAreNamedAsInstalled: the suites install
// config/webhook under the names both installs give it with their
// defaults, which are the operator's defaults.
func TestWebhookConfigurationsAreNamedAsInstalled(t *testing.T) {
	validating, mutating, err := webhookConfigurations(filepath.Join(RepoRoot(), "config", "webhook"))
	if err != nil {
		t.Fatal(err)
	}
	if len(validating) != 1 || validating[0].Name != setup.DefaultFencingConfiguration {
		t.Errorf("%d validating webhook configurations, want one named %s", len(validating), setup.DefaultFencingConfiguration)
	}
	if len(mutating) != 1 || mutating[0].Name != setup.DefaultPodConfiguration {
		t.Errorf("%d mutating webhook configurations, want one named %s", len(mutating), setup.DefaultPodConfiguration)
	}
	if len(validating) == 1 && len(validating[0].Webhooks) == 0 {
		t.Error("the fencing webhook's configuration has no webhook")
	}
}

// TestAFailedStartStopsItsControlPlane: when a step after kube-apiserver
// and etcd have started fails (here the CRDs, from a directory that does
// not exist), Start stops both. envtest alone leaves them running, and a
// test binary run from a removed checkout left control planes idling
// beside the benchmarks that came after it.
func TestAFailedStartStopsItsControlPlane(t *testing.T) {
	var te *envtest.Environment
	_, err := Start(func(e *envtest.Environment) {
		e.CRDDirectoryPaths = []string{filepath.Join(t.TempDir(), "no-crds")}
		te = e
	})
	if err == nil {
		t.Fatal("Start with a CRD directory that does not exist succeeded")
	}
	api, etcd := te.ControlPlane.APIServer, te.ControlPlane.Etcd
	if api == nil || etcd == nil || etcd.URL == nil || api.Port == "" {
		t.Fatalf("Start failed before the control plane started (%v): the test needs a failure after it", err)
	}
	for name, addr := range map[string]string{
		"kube-apiserver": net.JoinHostPort(api.Address, api.Port),
		"etcd":           etcd.URL.Host,
	} {
		if conn, dialErr := net.DialTimeout("tcp", addr, time.Second); dialErr == nil {
			_ = conn.Close()
			t.Errorf("%s still listens on %s after Start failed with %v", name, addr, err)
		}
	}
}
