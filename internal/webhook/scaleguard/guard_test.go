package scaleguard

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestResource(t *testing.T) {
	tests := []struct {
		gr   schema.GroupResource
		ns   string
		want string
	}{
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "default", "deployments.apps.default"},
		{schema.GroupResource{Resource: "replicationcontrollers"}, "team-a", "replicationcontrollers..team-a"},
		{schema.GroupResource{Group: "example.com", Resource: "widgets"}, "ns", "widgets.example.com.ns"},
	}
	for _, tt := range tests {
		if got := Resource(tt.gr, tt.ns); got != tt.want {
			t.Errorf("Resource(%v, %q) = %q, want %q", tt.gr, tt.ns, got, tt.want)
		}
	}
}

func TestMatchExpression(t *testing.T) {
	got := MatchExpression("fencedlease-system", "fencedlease-scale-guard")
	want := `authorizer.serviceAccount("fencedlease-system", "fencedlease-scale-guard").group("scale-guard.fencedlease.io")` +
		`.resource(request.resource.resource + '.' + request.resource.group + '.' + request.namespace)` +
		`.name(request.name).check("guard").allowed()`
	if got != want {
		t.Errorf("MatchExpression =\n%s\nwant\n%s", got, want)
	}
}

func TestAdd(t *testing.T) {
	deploy := schema.GroupResource{Group: "apps", Resource: "deployments"}
	rule := func(res string, names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{Group}, Resources: []string{res}, ResourceNames: names, Verbs: []string{Verb}}
	}
	foreign := rbacv1.PolicyRule{APIGroups: []string{Group}, Resources: []string{"deployments.apps.default"}, ResourceNames: []string{"x"}, Verbs: []string{"get"}}
	tests := []struct {
		name        string
		rules       []rbacv1.PolicyRule
		ns, obj     string
		wantChanged bool
		want        []rbacv1.PolicyRule
	}{
		{"no rules (as shipped)", nil, "default", "web", true,
			[]rbacv1.PolicyRule{rule("deployments.apps.default", "web")}},
		{"already guarded", []rbacv1.PolicyRule{rule("deployments.apps.default", "a", "web")}, "default", "web", false,
			[]rbacv1.PolicyRule{rule("deployments.apps.default", "a", "web")}},
		{"joins its rule, sorted", []rbacv1.PolicyRule{rule("deployments.apps.default", "b", "z")}, "default", "c", true,
			[]rbacv1.PolicyRule{rule("deployments.apps.default", "b", "c", "z")}},
		{"other namespace is another rule", []rbacv1.PolicyRule{rule("deployments.apps.default", "web")}, "prod", "web", true,
			[]rbacv1.PolicyRule{rule("deployments.apps.default", "web"), rule("deployments.apps.prod", "web")}},
		{"a rule of another verb does not count", []rbacv1.PolicyRule{foreign}, "default", "x", true,
			[]rbacv1.PolicyRule{foreign, rule("deployments.apps.default", "x")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fmtRules(tt.rules)
			got, changed := Add(tt.rules, deploy, tt.ns, tt.obj)
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if fmtRules(got) != fmtRules(tt.want) {
				t.Errorf("rules =\n%s\nwant\n%s", fmtRules(got), fmtRules(tt.want))
			}
			if fmtRules(tt.rules) != before {
				t.Errorf("input rules modified: %s", fmtRules(tt.rules))
			}
			if !Guarded(got, deploy, tt.ns, tt.obj) {
				t.Errorf("not guarded after Add")
			}
		})
	}
}

func fmtRules(rules []rbacv1.PolicyRule) string {
	var b strings.Builder
	for _, r := range rules {
		b.WriteString(r.String())
		b.WriteString("\n")
	}
	return b.String()
}
