package testenv

import (
	"path/filepath"
	"testing"

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
