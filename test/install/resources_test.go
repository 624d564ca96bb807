package install_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/webhook/scaleguard"
)

// fencingWebhooks returns the webhooks of the fencing configuration.
func fencingWebhooks(t *testing.T, objs []*unstructured.Unstructured) []admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ValidatingWebhookConfiguration" {
			return into[admissionregistrationv1.ValidatingWebhookConfiguration](t, o).Webhooks
		}
	}
	t.Fatal("no ValidatingWebhookConfiguration")
	return nil
}

// checkProtectsDeployments: the fencing webhook lists Deployments and all
// their subresources with its objectSelector, their scale in a second webhook without one, and the
// operator may get Deployments (to read a scaled one's label).
func checkProtectsDeployments(t *testing.T, objs []*unstructured.Unstructured, rules []rbacv1.PolicyRule) {
	g := NewWithT(t)
	hooks := fencingWebhooks(t, objs)
	g.Expect(hooks).To(HaveLen(2))
	g.Expect(hooks[0].Name).To(Equal("protected.fencedlease.io"))
	g.Expect(hooks[0].ObjectSelector).NotTo(BeNil())
	var resources []string
	for _, r := range hooks[0].Rules {
		resources = append(resources, r.Resources...)
	}
	g.Expect(resources).To(ContainElements("configmaps", "configmaps/*", "secrets", "secrets/*", "deployments", "deployments/*"),
		"each resource with all its subresources")
	g.Expect(hooks[1].Name).To(Equal("protected-scale.fencedlease.io"))
	g.Expect(hooks[1].ObjectSelector).To(BeNil(), "a Scale carries no labels to select on")
	g.Expect(hooks[1].Rules).To(HaveLen(1))
	g.Expect(hooks[1].Rules[0].Resources).To(Equal([]string{"deployments/scale"}))
	g.Expect(hooks[1].Rules[0].Operations).To(Equal([]admissionregistrationv1.OperationType{admissionregistrationv1.Update}))
	g.Expect(hooks[1].ClientConfig.Service).To(Equal(hooks[0].ClientConfig.Service), "the same endpoint decides both")
	g.Expect(hooks[1].FailurePolicy).To(Equal(hooks[0].FailurePolicy))
	g.Expect(grants(rules, "apps", "deployments", "get")).To(BeTrue(), "the operator reads a scaled Deployment's label")
	g.Expect(grants(rules, "apps", "deployments", "list")).To(BeTrue(), "the scale guard's resync lists the labelled Deployments")
	// Finding 5 of issue 43: the webhook of scale writes is called only for
	// the objects the scale guard names, through the condition the operator
	// writes too (so that both agree), and the fencing webhook, which writes
	// the guard, has no side effect on a dry run.
	guard := scaleguard.Guard{Role: "fencedlease-scale-guard", SANamespace: "fencedlease-system", SAName: "fencedlease-scale-guard"}
	g.Expect(hooks[1].MatchConditions).To(Equal([]admissionregistrationv1.MatchCondition{guard.MatchCondition()}))
	for _, h := range hooks {
		g.Expect(*h.SideEffects).To(Equal(admissionregistrationv1.SideEffectClassNoneOnDryRun), h.Name)
	}
	checkScaleGuard(t, objs, guard)
}

// checkScaleGuard: the install has the guard's service account, its
// ClusterRole without rules (the operator writes them: an apply that named
// them would take them away), the binding, the operator's flags naming
// them, and the operator's right to write that one role and to hold the
// guard verb (RBAC's escalation check).
func checkScaleGuard(t *testing.T, objs []*unstructured.Unstructured, guard scaleguard.Guard) {
	g := NewWithT(t)
	sa := find(t, objs, "ServiceAccount", guard.SAName)
	g.Expect(sa.GetNamespace()).To(Equal(guard.SANamespace))
	role := find(t, objs, "ClusterRole", guard.Role)
	_, hasRules := role.Object["rules"]
	g.Expect(hasRules).To(BeFalse(), "the guard's rules are the operator's")
	binding := into[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", guard.Role))
	g.Expect(binding.RoleRef.Name).To(Equal(guard.Role))
	g.Expect(binding.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: guard.SAName, Namespace: guard.SANamespace}}))
	manager := into[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "fencedlease-manager-role"))
	g.Expect(manager.Rules).To(ContainElement(rbacv1.PolicyRule{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"},
		ResourceNames: []string{guard.Role}, Verbs: []string{"get", "update"}}))
	g.Expect(grants(manager.Rules, scaleguard.Group, "*", scaleguard.Verb)).To(BeTrue())
	var deployment *appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" && strings.HasSuffix(o.GetName(), "controller-manager") {
			deployment = into[appsv1.Deployment](t, o)
		}
	}
	g.Expect(deployment).NotTo(BeNil(), "the operator's Deployment")
	g.Expect(deployment.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--scale-guard-role="+guard.Role, "--scale-guard-service-account="+guard.SANamespace+"/"+guard.SAName))
}

// grants says whether a rule grants verb on resource of group.
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) && len(r.ResourceNames) == 0 {
			return true
		}
	}
	return false
}

// TestChartProtectedResources: webhooks.protectedResources renders the
// fencing webhook's rules, the webhook of scale writes, and the operator's
// right to read the scaled objects.
func TestChartProtectedResources(t *testing.T) {
	objs := decode(t, renderChart(t, defaultRelease, "fencedlease-system", "-f", repoPath("test", "install", "testdata", "protected-resources.yaml")))
	role := into[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "fencedlease-manager-role"))
	checkProtectsDeployments(t, objs, role.Rules)
	// The rules are derived as coverage.Rules derives them: each resource
	// and R/*, whatever subresource an entry names.
	NewWithT(t).Expect(fencingWebhooks(t, objs)[0].Rules).To(Equal(coverage.Rules([]coverage.Entry{
		{Group: "", Resources: []string{"configmaps", "secrets"}},
		{Group: "apps", Resources: []string{"deployments", "deployments/scale"}},
		{Group: "examples.fencedlease.io", Resources: []string{"widgets", "widgets/status"}},
	})), "every subresource goes with its object's selector")

	// The defaults: ConfigMaps and Secrets, one webhook.
	hooks := fencingWebhooks(t, decode(t, renderChart(t, defaultRelease, "fencedlease-system")))
	NewWithT(t).Expect(hooks).To(HaveLen(1))
}

// TestKustomizeProtectsDeployments: the overlay config/samples/protect-deployments,
// the kustomize form of the same value.
func TestKustomizeProtectsDeployments(t *testing.T) {
	out, err := run(context.Background(), nil, filepath.Join(kubebuilderAssets(t), "kubectl"), "kustomize", "config/samples/protect-deployments")
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	role := into[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "fencedlease-scale-reader"))
	binding := into[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", "fencedlease-scale-reader"))
	NewWithT(t).Expect(binding.Subjects[0].Name).To(Equal("fencedlease-controller-manager"))
	checkProtectsDeployments(t, objs, role.Rules)
}

// TestChartRefusesUnhonourableResources (issue 43, finding 6): what the
// fencing webhook cannot protect fails the render with a message that
// names it: pods and leases (never sent to it), common cluster-scoped
// built-ins, and wildcards.
func TestChartRefusesUnhonourableResources(t *testing.T) {
	for _, tc := range []struct{ group, resource, want string }{
		{"", "pods", `webhooks.protectedResources: pods (apiGroup "") cannot be protected: it is never sent to the fencing webhook`},
		{"coordination.k8s.io", "leases/status", `webhooks.protectedResources: leases (apiGroup "coordination.k8s.io") cannot be protected: it is never sent to the fencing webhook`},
		{"", "namespaces", `webhooks.protectedResources: namespaces (apiGroup "") cannot be protected: it is cluster-scoped`},
		{"rbac.authorization.k8s.io", "clusterroles", `webhooks.protectedResources: clusterroles (apiGroup "rbac.authorization.k8s.io") cannot be protected: it is cluster-scoped`},
		{"*", "configmaps", `at '/webhooks/protectedResources/0/apiGroup': '*' does not match pattern`},
		{"apps", "*", `at '/webhooks/protectedResources/0/resources/0': '*' does not match pattern`},
	} {
		t.Run(tc.group+"/"+tc.resource, func(t *testing.T) {
			_, err := helm(t, "template", defaultRelease, chartDir, "--namespace", defaultNamespace,
				"--set", "webhooks.protectedResources[0].apiGroup="+tc.group+",webhooks.protectedResources[0].resources[0]="+tc.resource)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}
