package protected_test

import (
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestUnhonourableResourcesAreRefusedAtStart (issue 43, finding 6): a
// fencing webhook configuration that lists a cluster-scoped resource, or one
// served by an aggregated API server, keeps the operator from starting, with
// an error that names the resource and why; listed as namespaced resources
// are, they would be protected by nothing.
func TestUnhonourableResourcesAreRefusedAtStart(t *testing.T) {
	f := newFixture(t)
	original := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: setup.DefaultFencingConfiguration}, original)).To(Succeed())
	t.Cleanup(func() { f.restoreConfiguration(original) })
	list := func(entries ...coverage.Entry) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: setup.DefaultFencingConfiguration}, vwc)).To(Succeed())
		vwc.Webhooks = original.DeepCopy().Webhooks
		vwc.Webhooks[0].Rules = append(vwc.Webhooks[0].Rules, coverage.Rules(entries)...)
		f.g.Expect(f.c.Update(f.ctx, vwc)).To(Succeed())
	}
	start := func() error {
		m, err := testenv.StartManager(f.ctx, operatorConfig, testenv.ManagerOptions{Namespace: f.ns,
			Webhooks: &env.WebhookInstallOptions, WebhookOptions: webhookOptions})
		if err == nil {
			_ = m.Stop()
		}
		return err
	}

	list(coverage.Entry{Group: "", Resources: []string{"namespaces"}})
	f.g.Expect(start()).To(MatchError(ContainSubstring(
		"lists resources whose objects the fencing webhook cannot protect (remove them from webhooks.protectedResources): namespaces: it is cluster-scoped")))

	// An aggregated API server (an APIService with a service; it need not
	// even answer).
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1.samples.fencedlease.io"},
		"spec": map[string]any{"group": "samples.fencedlease.io", "version": "v1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true, "service": map[string]any{"namespace": f.ns, "name": "samples"}},
	}}
	f.g.Expect(f.c.Create(f.ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = f.c.Delete(f.ctx, svc) })
	list(coverage.Entry{Group: "samples.fencedlease.io", Resources: []string{"samples"}})
	f.g.Expect(start()).To(MatchError(ContainSubstring(
		"samples.samples.fencedlease.io: it is served by an aggregated API server (an APIService with a service), which need not call admission webhooks")))

	// Namespaced resources, and one not served yet: the operator starts.
	list(coverage.Entry{Group: "apps", Resources: []string{"deployments"}}, coverage.Entry{Group: "later.example.com", Resources: []string{"things"}})
	f.g.Expect(start()).To(Succeed())
}
