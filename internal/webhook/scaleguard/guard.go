package scaleguard

import (
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the guard's pseudo-resources. Nothing serves it;
// it exists only in RBAC rules and authorizer checks.
const Group = "scale-guard.fencedlease.io"

// Verb is the verb the marker service account holds on a guarded name.
const Verb = "guard"

// Resource is the pseudo-resource that stands for the objects of resource gr
// in namespace ns: "<resource>.<group>.<namespace>", with the core group as an
// empty segment. It must equal what MatchExpression computes from the
// admission request, so the two are built from the same pieces.
func Resource(gr schema.GroupResource, ns string) string {
	return gr.Resource + "." + gr.Group + "." + ns
}

// MatchExpression is the CEL matchCondition of the scale webhook: true only
// for requests on an object whose name the marker service account (namespace
// saNamespace, name saName) is guarded for.
func MatchExpression(saNamespace, saName string) string {
	return fmt.Sprintf("authorizer.serviceAccount(%q, %q).group(%q)"+
		".resource(request.resource.resource + '.' + request.resource.group + '.' + request.namespace)"+
		".name(request.name).check(%q).allowed()", saNamespace, saName, Group, Verb)
}

// Guarded reports whether rules already guard the object name of resource gr
// in namespace ns. Only rules written in the guard's own shape count.
func Guarded(rules []rbacv1.PolicyRule, gr schema.GroupResource, ns, name string) bool {
	res := Resource(gr, ns)
	for _, r := range rules {
		if isGuardRule(r, res) && slices.Contains(r.ResourceNames, name) {
			return true
		}
	}
	return false
}

// Add returns rules with name guarded for resource gr in namespace ns, and
// whether anything changed. The name joins the rule of its pseudo-resource
// (one rule per pseudo-resource, names sorted), so the ClusterRole stays
// small and its writes are deterministic. rules is not modified.
func Add(rules []rbacv1.PolicyRule, gr schema.GroupResource, ns, name string) ([]rbacv1.PolicyRule, bool) {
	return addKey(rules, Key{Resource: Resource(gr, ns), Name: name})
}

func addKey(rules []rbacv1.PolicyRule, k Key) ([]rbacv1.PolicyRule, bool) {
	for _, r := range rules {
		if isGuardRule(r, k.Resource) && slices.Contains(r.ResourceNames, k.Name) {
			return rules, false
		}
	}
	out := make([]rbacv1.PolicyRule, 0, len(rules)+1)
	added := false
	for _, r := range rules {
		if !added && isGuardRule(r, k.Resource) {
			r.ResourceNames = append(slices.Clone(r.ResourceNames), k.Name)
			slices.Sort(r.ResourceNames)
			added = true
		}
		out = append(out, r)
	}
	if !added {
		out = append(out, rbacv1.PolicyRule{
			APIGroups:     []string{Group},
			Resources:     []string{k.Resource},
			ResourceNames: []string{k.Name},
			Verbs:         []string{Verb},
		})
	}
	return out, true
}

func isGuardRule(r rbacv1.PolicyRule, res string) bool {
	return slices.Equal(r.APIGroups, []string{Group}) &&
		slices.Equal(r.Resources, []string{res}) &&
		slices.Equal(r.Verbs, []string{Verb}) &&
		len(r.NonResourceURLs) == 0
}
