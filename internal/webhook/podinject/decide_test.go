package podinject

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func fl(ns, name string, gate bool, sel metav1.LabelSelector) fencingv1alpha1.FencedLease {
	return fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       fencingv1alpha1.FencedLeaseSpec{Selector: sel, ReadinessGate: gate},
	}
}

func TestDecide(t *testing.T) {
	dbSel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	notSelected := `pod "ns/db-0" has label fencedlease.io/inject=true but no FencedLease or FencedShardSet in namespace "ns" selects it: no token files are mounted`
	tests := []struct {
		name string
		pod  *corev1.Pod
		fls  []fencingv1alpha1.FencedLease
		sets []fencingv1alpha1.FencedShardSet
		want Decision
	}{{
		name: "no FencedLease at all",
		pod:  pod(nil),
		want: Decision{Warnings: []string{notSelected}},
	}, {
		name: "selected, no readiness gate",
		pod:  pod(nil),
		fls:  []fencingv1alpha1.FencedLease{fl("ns", "db", false, dbSel)},
		want: Decision{Selected: []string{"db"}},
	}, {
		name: "selected, readiness gate",
		pod:  pod(nil),
		fls:  []fencingv1alpha1.FencedLease{fl("ns", "db", true, dbSel)},
		want: Decision{Selected: []string{"db"}, ReadinessGate: true},
	}, {
		name: "selected by matchExpressions",
		pod:  pod(nil),
		fls: []fencingv1alpha1.FencedLease{fl("ns", "db", true, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"db", "cache"}},
		}})},
		want: Decision{Selected: []string{"db"}, ReadinessGate: true},
	}, {
		name: "a FencedLease of another namespace does not select the pod",
		pod:  pod(nil),
		fls:  []fencingv1alpha1.FencedLease{fl("other", "db", true, dbSel)},
		want: Decision{Warnings: []string{notSelected}},
	}, {
		name: "a selector that does not match",
		pod:  pod(nil),
		fls:  []fencingv1alpha1.FencedLease{fl("ns", "web", true, metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})},
		want: Decision{Warnings: []string{notSelected}},
	}, {
		name: "invalid and empty selectors select nothing",
		pod:  pod(nil),
		fls: []fencingv1alpha1.FencedLease{
			fl("ns", "bad", true, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus", Values: []string{"db"}}}}),
			fl("ns", "empty", true, metav1.LabelSelector{}),
		},
		want: Decision{Warnings: []string{notSelected}},
	}, {
		name: "the warning names a pod that has only a generateName",
		pod:  pod(func(p *corev1.Pod) { p.Name, p.GenerateName = "", "db-7d4b9c-" }),
		want: Decision{Warnings: []string{`pod with generateName "db-7d4b9c-" in namespace "ns" has label fencedlease.io/inject=true but no FencedLease or FencedShardSet in namespace "ns" selects it: no token files are mounted`}},
	}, {
		name: "selected twice: warned, gate if any asks",
		pod:  pod(nil),
		fls:  []fencingv1alpha1.FencedLease{fl("ns", "z-db", false, dbSel), fl("ns", "a-db", true, dbSel)},
		want: Decision{
			Selected:      []string{"a-db", "z-db"},
			ReadinessGate: true,
			Warnings:      []string{`pod "ns/db-0" is selected by several FencedLeases (a-db, z-db): none of them will grant it the lease`},
		},
	}, {
		name: "selected by a FencedShardSet: the token files, no gate",
		pod:  pod(nil),
		sets: []fencingv1alpha1.FencedShardSet{set("ns", "work", dbSel), set("other", "work", dbSel)},
		want: Decision{Sets: []string{"work"}},
	}, {
		name: "selected by two FencedShardSets: warned",
		pod:  pod(nil),
		sets: []fencingv1alpha1.FencedShardSet{set("ns", "b", dbSel), set("ns", "a", dbSel)},
		want: Decision{Sets: []string{"a", "b"}, Warnings: []string{`pod "ns/db-0" is selected by several FencedShardSets (a, b): none of them will give it shards`}},
	}, {
		name: "a FencedShardSet whose selector does not match",
		pod:  pod(nil),
		sets: []fencingv1alpha1.FencedShardSet{set("ns", "web", metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})},
		want: Decision{Warnings: []string{notSelected}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tt.pod, tt.fls, tt.sets)
			g.Expect(d).To(Equal(tt.want))
			g.Expect(d.Injects()).To(Equal(len(tt.want.Selected)+len(tt.want.Sets) > 0))
		})
	}
}

func set(ns, name string, sel metav1.LabelSelector) fencingv1alpha1.FencedShardSet {
	return fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: sel, Shards: 4}}
}
