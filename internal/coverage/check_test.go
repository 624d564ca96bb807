package coverage

import (
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	cfgName = "fencedlease-fencing"
	hook    = "protected.fencedlease.io"
)

// installed is the webhook as config/webhook/fencing.yaml installs it.
func installed(mutate func(*admissionregistrationv1.ValidatingWebhook)) *admissionregistrationv1.ValidatingWebhookConfiguration {
	w := admissionregistrationv1.ValidatingWebhook{
		Name: hook,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "secrets"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"},
		}}},
		FailurePolicy: ptr.To(admissionregistrationv1.Fail),
	}
	if mutate != nil {
		mutate(&w)
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "other.example.com"}, w},
	}
}

func TestCheck(t *testing.T) {
	team := map[string]string{"kubernetes.io/metadata.name": "team-a", "tier": "prod"}
	const head = "writes to protected ConfigMaps and Secrets in namespace team-a are not checked: "
	const where = "webhook protected.fencedlease.io in ValidatingWebhookConfiguration fencedlease-fencing"
	rule := func(ops []admissionregistrationv1.OperationType, groups, versions, resources []string, scope admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources, Scope: &scope}}
	}
	all := []admissionregistrationv1.OperationType{"*"}
	for _, tc := range []struct {
		name      string
		cfg       *admissionregistrationv1.ValidatingWebhookConfiguration
		namespace string
		labels    map[string]string
		want      string
	}{
		{name: "covered", cfg: installed(nil), namespace: "team-a", labels: team},
		{name: "the operator's own namespace is covered", cfg: installed(nil), namespace: "fencedlease-system",
			labels: map[string]string{"kubernetes.io/metadata.name": "fencedlease-system"}},
		{name: "excluded by default", cfg: installed(nil), namespace: "kube-system", labels: map[string]string{"kubernetes.io/metadata.name": "kube-system"},
			want: "writes to protected ConfigMaps and Secrets in namespace kube-system are not checked: the namespaceSelector of " + where + " excludes it"},
		{name: "not installed", namespace: "team-a", labels: team,
			want: head + "ValidatingWebhookConfiguration fencedlease-fencing is not installed"},
		{name: "no such webhook", cfg: &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "x"}}},
			namespace: "team-a", labels: team, want: head + "ValidatingWebhookConfiguration fencedlease-fencing has no webhook protected.fencedlease.io"},
		{name: "excluded by a label", namespace: "team-a", labels: team, want: head + "the namespaceSelector of " + where + " excludes it",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions,
					metav1.LabelSelectorRequirement{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"prod"}})
			})},
		{name: "selected by a label", namespace: "team-a", labels: team,
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}
			})},
		{name: "no namespaceSelector selects everything", namespace: "kube-system", labels: map[string]string{"kubernetes.io/metadata.name": "kube-system"},
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) { w.NamespaceSelector = nil })},
		{name: "invalid namespaceSelector", namespace: "team-a", labels: team,
			want: head + "the namespaceSelector of " + where + ` is invalid: "Bogus" is not a valid label selector operator`,
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
			})},
		{name: "DELETE not intercepted", namespace: "team-a", labels: team, want: head + where + " does not intercept DELETE of configmaps",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.Rules[0].Operations = []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}
			})},
		{name: "secrets not intercepted", namespace: "team-a", labels: team, want: head + where + " does not intercept CREATE of secrets",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Resources = []string{"configmaps"} })},
		{name: "cluster-scoped rule only", namespace: "team-a", labels: team, want: head + where + " does not intercept CREATE of configmaps",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.Rules[0].Scope = ptr.To(admissionregistrationv1.ClusterScope)
			})},
		{name: "subresources are not the resource", namespace: "team-a", labels: team, want: head + where + " does not intercept CREATE of configmaps",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.Rules[0].Resources = []string{"configmaps/*", "secrets"}
			})},
		{name: "wildcards and split rules", namespace: "team-a", labels: team,
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{
					rule(all, []string{"*"}, []string{"*"}, []string{"configmaps"}, admissionregistrationv1.AllScopes),
					rule([]admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}, []string{""}, []string{"v1"}, []string{"*"}, admissionregistrationv1.NamespacedScope),
				}
			})},
		{name: "another API group only", namespace: "team-a", labels: team, want: head + where + " does not intercept CREATE of configmaps",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(all, []string{"apps"}, []string{"*"}, []string{"*"}, admissionregistrationv1.AllScopes)}
			})},
		{name: "fails open", namespace: "team-a", labels: team,
			want: "writes to protected ConfigMaps and Secrets in namespace team-a are admitted unchecked whenever the webhook cannot be reached: " + where + " has failurePolicy Ignore",
			cfg: installed(func(w *admissionregistrationv1.ValidatingWebhook) {
				w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Check(tc.cfg, cfgName, hook, tc.namespace, tc.labels)).To(Equal(tc.want))
		})
	}
}

// TestRules: each resource listed gets a rule for itself and for all its
// subresources; a listed subresource means its resource, once.
func TestRules(t *testing.T) {
	g := NewWithT(t)
	rules := Rules([]Entry{
		{Group: "apps", Resources: []string{"deployments", "deployments/scale", "statefulsets/status"}},
		{Group: "examples.fencedlease.io", Resources: []string{"widgets/status"}},
		{Group: "empty"},
	})
	g.Expect(rules).To(HaveLen(2))
	g.Expect(rules[0].APIGroups).To(Equal([]string{"apps"}))
	g.Expect(rules[0].Resources).To(Equal([]string{"deployments", "deployments/*", "statefulsets", "statefulsets/*"}))
	g.Expect(rules[0].Operations).To(ConsistOf(admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete))
	g.Expect(*rules[0].Scope).To(Equal(admissionregistrationv1.NamespacedScope))
	g.Expect(rules[1].Resources).To(Equal([]string{"widgets", "widgets/*"}))
	// What they list covers every subresource of the resources.
	listed := Listed(&admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{{Rules: rules}}})
	g.Expect(Covers(listed, "apps", "statefulsets", "status")).To(BeTrue())
	g.Expect(Covers(listed, "apps", "statefulsets", "")).To(BeTrue())
	g.Expect(Covers(listed, "apps", "replicasets", "status")).To(BeFalse())
}
