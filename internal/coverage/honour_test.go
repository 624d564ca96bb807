package coverage

import (
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRefusals: of the resources a configuration lists, wildcards, pods,
// leases, cluster-scoped resources and those of aggregated API servers are
// refused, each named with why; namespaced ones and unknown ones are not.
func TestRefusals(t *testing.T) {
	g := NewWithT(t)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{{Rules: Rules([]Entry{
		{Group: "", Resources: []string{"configmaps", "namespaces", "pods"}},
		{Group: "apps", Resources: []string{"deployments/scale"}},
		{Group: "coordination.k8s.io", Resources: []string{"leases"}},
		{Group: "metrics.example.com", Resources: []string{"samples"}},
		{Group: "example.com", Resources: []string{"widgets"}},
		{Group: "*", Resources: []string{"*"}},
	})}}}
	refused, err := Refusals(cfg, mapper, []string{"metrics.example.com"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(refused).To(Equal([]string{
		"*.*: a wildcard: list each resource by name",
		"leases.coordination.k8s.io: leases are never sent to the fencing webhook: the operator's records are Leases",
		"namespaces: it is cluster-scoped: the protected-by label names a FencedLease in the object's namespace, and its objects have none",
		"pods: pods are never sent to the fencing webhook: a pod is a holder, not a protected object",
		"samples.metrics.example.com: it is served by an aggregated API server (an APIService with a service), which need not call admission webhooks",
	}))
}
