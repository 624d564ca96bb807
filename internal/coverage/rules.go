package coverage

import (
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Entry is one item of the chart's webhooks.protectedResources: an API
// group and the resources of it that are protected.
type Entry struct {
	Group     string
	Resources []string
}

// Rules are the rules of the fencing webhook (the one with the objectSelector)
// for entries, as the chart's templates/webhooks.yaml renders them: for each
// resource R listed, R and R/* (CREATE, UPDATE, DELETE), so that every
// subresource whose request carries the object itself (status, and any
// other of the same kind) is decided whenever the old or the new object is
// labelled, without being listed. An entry that names a subresource
// ("deployments/scale", "widgets/status") means its resource. The
// configuration is rendered by the chart and the kustomize overlays, not by
// the operator: this function is the reference the tests hold them to.
func Rules(entries []Entry) []admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.NamespacedScope
	var out []admissionregistrationv1.RuleWithOperations
	for _, e := range entries {
		var resources []string
		for _, r := range e.Resources {
			base, _, _ := strings.Cut(r, "/")
			if !slices.Contains(resources, base) {
				resources = append(resources, base, base+"/*")
			}
		}
		if len(resources) == 0 {
			continue
		}
		out = append(out, admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{e.Group}, APIVersions: []string{"*"}, Resources: resources, Scope: &scope},
		})
	}
	return out
}
