package coverage

import (
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Check says why writes to the protected ConfigMaps and Secrets of a
// namespace are not checked by webhook webhookName of the configuration
// named configName (cfg, nil when it is not installed); "" when they are.
// nsLabels are the namespace's labels.
func Check(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, configName, webhookName, namespace string, nsLabels map[string]string) string {
	head := fmt.Sprintf("writes to protected ConfigMaps and Secrets in namespace %s are not checked: ", namespace)
	if cfg == nil {
		return head + fmt.Sprintf("ValidatingWebhookConfiguration %s is not installed", configName)
	}
	i := slices.IndexFunc(cfg.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return w.Name == webhookName })
	if i < 0 {
		return head + fmt.Sprintf("ValidatingWebhookConfiguration %s has no webhook %s", configName, webhookName)
	}
	w := &cfg.Webhooks[i]
	where := fmt.Sprintf("webhook %s in ValidatingWebhookConfiguration %s", webhookName, configName)
	if w.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			return head + fmt.Sprintf("the namespaceSelector of %s is invalid: %v", where, err)
		}
		if !sel.Matches(labels.Set(nsLabels)) {
			return head + fmt.Sprintf("the namespaceSelector of %s excludes it", where)
		}
	}
	for _, resource := range []string{"configmaps", "secrets"} {
		for _, op := range []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete} {
			if !slices.ContainsFunc(w.Rules, func(r admissionregistrationv1.RuleWithOperations) bool { return intercepts(r, resource, op) }) {
				return head + fmt.Sprintf("%s does not intercept %s of %s", where, op, resource)
			}
		}
	}
	if w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore {
		return fmt.Sprintf("writes to protected ConfigMaps and Secrets in namespace %s are admitted unchecked whenever the webhook cannot be reached: %s has failurePolicy Ignore",
			namespace, where)
	}
	return ""
}

// intercepts says whether a rule sends op on a core/v1 resource (not a
// subresource) of a namespace to the webhook.
func intercepts(r admissionregistrationv1.RuleWithOperations, resource string, op admissionregistrationv1.OperationType) bool {
	anyOf := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return (slices.Contains(r.Operations, op) || slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) &&
		anyOf(r.APIGroups, "") && anyOf(r.APIVersions, "v1") && anyOf(r.Resources, resource) &&
		(r.Scope == nil || *r.Scope == admissionregistrationv1.AllScopes || *r.Scope == admissionregistrationv1.NamespacedScope)
}
