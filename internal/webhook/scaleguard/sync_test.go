package scaleguard

import (
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func guardRule(res string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{Group}, Resources: []string{res}, ResourceNames: names, Verbs: []string{Verb}}
}

// TestPlan: protected keys are added at once; an unprotected held key is
// removed only after it has been seen unprotected for the grace, counted
// from the first resync that saw it so; a key protected again starts over.
func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	a := Key{"deployments.apps.ns", "a"}
	b := Key{"deployments.apps.ns", "b"}
	c := Key{"widgets.example.com.ns", "c"}
	grace := 2 * time.Minute

	add, remove, since := Plan([]Key{a, b}, map[Key]bool{a: true, c: true}, nil, t0, grace)
	if !slices.Equal(add, []Key{c}) || len(remove) != 0 || !since[b].Equal(t0) || len(since) != 1 {
		t.Fatalf("first resync: add %v remove %v since %v; want add [c], nothing removed, b seen at t0", add, remove, since)
	}
	add, remove, since = Plan([]Key{a, b, c}, map[Key]bool{a: true, c: true}, since, t0.Add(time.Minute), grace)
	if len(add) != 0 || len(remove) != 0 || !since[b].Equal(t0) {
		t.Fatalf("a minute later: add %v remove %v since %v; want nothing yet, b still seen since t0", add, remove, since)
	}
	// b is protected again for one resync: its clock starts over.
	_, remove, since2 := Plan([]Key{a, b, c}, map[Key]bool{a: true, b: true, c: true}, since, t0.Add(90*time.Second), grace)
	if len(remove) != 0 || len(since2) != 0 {
		t.Fatalf("b protected again: remove %v since %v; want nothing", remove, since2)
	}
	_, remove, _ = Plan([]Key{a, b, c}, map[Key]bool{a: true, c: true}, since2, t0.Add(3*time.Minute), grace)
	if len(remove) != 0 {
		t.Fatalf("b unprotected again for 0s removed: %v", remove)
	}
	_, remove, since = Plan([]Key{a, b, c}, map[Key]bool{a: true, c: true}, since, t0.Add(2*time.Minute), grace)
	if !slices.Equal(remove, []Key{b}) || len(since) != 0 {
		t.Fatalf("after the grace: remove %v since %v; want [b] and nothing left to watch", remove, since)
	}
}

// TestApply: names join and leave the rule of their pseudo-resource; a rule
// left empty goes; rules not in the guard's shape stay as they are.
func TestApply(t *testing.T) {
	foreign := rbacv1.PolicyRule{APIGroups: []string{Group}, Resources: []string{"deployments.apps.ns"}, ResourceNames: []string{"x"}, Verbs: []string{"get"}}
	rules := []rbacv1.PolicyRule{guardRule("deployments.apps.ns", "a", "b"), foreign}
	got, changed := Apply(rules, []Key{{"deployments.apps.ns", "c"}, {"widgets.example.com.ns", "w"}}, []Key{{"deployments.apps.ns", "a"}, {"deployments.apps.ns", "x"}})
	want := []rbacv1.PolicyRule{guardRule("deployments.apps.ns", "b", "c"), foreign, guardRule("widgets.example.com.ns", "w")}
	if !changed || len(got) != len(want) {
		t.Fatalf("Apply = %v (changed %v), want %v", got, changed, want)
	}
	for i := range want {
		if !slices.Equal(got[i].ResourceNames, want[i].ResourceNames) || !slices.Equal(got[i].Verbs, want[i].Verbs) || got[i].Resources[0] != want[i].Resources[0] {
			t.Errorf("rule %d = %v, want %v", i, got[i], want[i])
		}
	}
	if !slices.Equal(rules[0].ResourceNames, []string{"a", "b"}) {
		t.Errorf("Apply modified its input: %v", rules[0].ResourceNames)
	}
	got, _ = Apply(got, nil, []Key{{"widgets.example.com.ns", "w"}})
	if len(got) != 2 {
		t.Errorf("a rule left without names stays: %v", got)
	}
	if _, changed := Apply(got, []Key{{"deployments.apps.ns", "b"}}, nil); changed {
		t.Errorf("adding a held key reports a change")
	}
	if keys := Keys(got); !slices.Equal(keys, []Key{{"deployments.apps.ns", "b"}, {"deployments.apps.ns", "c"}}) {
		t.Errorf("Keys = %v: the foreign rule's name counts, or a guarded one is missing", keys)
	}
}

// TestConfigure: the scale webhook gets the guard's matchCondition, once;
// another webhook and other conditions are left alone.
func TestConfigure(t *testing.T) {
	g := Guard{Role: "r", SANamespace: "fencedlease-system", SAName: "fencedlease-scale-guard"}
	other := admissionregistrationv1.MatchCondition{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{
		{Name: "protected.fencedlease.io"},
		{Name: "protected-scale.fencedlease.io", MatchConditions: []admissionregistrationv1.MatchCondition{other, {Name: ConditionName, Expression: "true"}}},
	}}
	if !g.Configure(cfg, "protected-scale.fencedlease.io") {
		t.Fatal("Configure changed nothing, want the stale condition replaced")
	}
	if len(cfg.Webhooks[0].MatchConditions) != 0 {
		t.Errorf("the fencing webhook got conditions: %v", cfg.Webhooks[0].MatchConditions)
	}
	if got := cfg.Webhooks[1].MatchConditions; len(got) != 2 || got[0] != other || got[1] != g.MatchCondition() {
		t.Errorf("scale webhook conditions = %v", got)
	}
	if g.Configure(cfg, "protected-scale.fencedlease.io") {
		t.Error("a second Configure changed something")
	}
	if g.Configure(cfg, "absent") {
		t.Error("Configure of an absent webhook changed something")
	}
}
