package main

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	rules "github.com/fencedlease/fencedlease/internal/fencing"
)

// TestExplainRecognizesEveryDenial: for every reason the fencing webhook
// denies with, the message its rules produce is recognized as that reason,
// so a change of wording in internal/fencing fails here.
func TestExplainRecognizesEveryDenial(t *testing.T) {
	obj := func(lease string, ann map[string]string) *rules.Object {
		return &rules.Object{Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: lease}, Annotations: ann}
	}
	fence := func(v string) map[string]string { return map[string]string{fencingv1alpha1.AnnotationFence: v} }
	holder := rules.Caller{Username: "system:serviceaccount:ns:default", PodName: "a", PodUID: types.UID("uid-a")}
	standby := rules.Caller{Username: "system:serviceaccount:ns:default", PodName: "b", PodUID: types.UID("uid-b")}
	held := rules.Lease{Found: true, Fence: 41, Holder: &rules.Holder{PodName: "a", PodUID: "uid-a"}}
	req := func(op rules.Operation, old, new *rules.Object, c rules.Caller) rules.Request {
		return rules.Request{Operation: op, Kind: "ConfigMap", Namespace: "ns", Name: "cfg", Old: old, New: new, Caller: c}
	}
	tests := []struct {
		reason rules.Reason
		r      rules.Request
		lease  rules.Lease
	}{
		{rules.ReasonLabelChanged, req(rules.Update, obj("db", fence("41")), &rules.Object{Annotations: fence("41")}, holder), held},
		{rules.ReasonSubresourceMetadata, rules.Request{Operation: rules.Update, Kind: "Deployment", Namespace: "ns", Name: "web", SubResource: "status",
			Old: obj("db", fence("41")), New: obj("db", fence("9223372036854775807")), Caller: standby, FieldManager: "m;fencedlease.io/fence=41"}, held},
		{rules.ReasonMissingFence, rules.Request{Operation: rules.Update, Kind: "Deployment", Namespace: "ns", Name: "web", SubResource: "status",
			Old: obj("db", fence("41")), New: obj("db", fence("41")), Caller: holder, FieldManager: "m"}, held},
		{rules.ReasonOwnerUnprotected, func() rules.Request {
			o := obj("db", fence("41"))
			o.Owners = []rules.OwnerRef{{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: "u1"}}
			return req(rules.Create, nil, o, holder)
		}(), held},
		{rules.ReasonInvalidLabel, req(rules.Create, nil, obj("", fence("41")), holder), held},
		{rules.ReasonMissingFence, req(rules.Create, nil, obj("db", nil), holder), held},
		{rules.ReasonMalformedFence, req(rules.Create, nil, obj("db", fence("041")), holder), held},
		{rules.ReasonObjectFenceRegression, req(rules.Update, obj("db", fence("45")), obj("db", fence("44")), holder), rules.Lease{Found: true, Fence: 44, Holder: held.Holder}},
		{rules.ReasonStaleFence, req(rules.Create, nil, obj("db", fence("40")), holder), held},
		{rules.ReasonUnknownFence, req(rules.Create, nil, obj("db", fence("99")), holder), held},
		{rules.ReasonUnknownFence, req(rules.Delete, obj("db", fence("99")), nil, holder), held},
		{rules.ReasonLeaseNotFound, req(rules.Create, nil, obj("db", fence("41")), holder), rules.Lease{}},
		{rules.ReasonNoHolder, req(rules.Create, nil, obj("db", fence("41")), holder), rules.Lease{Found: true, Fence: 41}},
		{rules.ReasonNotHolder, req(rules.Create, nil, obj("db", fence("41")), standby), held},
		{rules.ReasonWriteNotPod, req(rules.Create, nil, obj("db", fence("41")), rules.Caller{Username: "alice"}), held},
		{rules.ReasonDeleteNotPod, req(rules.Delete, obj("db", fence("41")), nil, rules.Caller{Username: "alice"}), held},
		{rules.ReasonDeleteOlderWrite, req(rules.Delete, obj("db", fence("40")), nil, holder), held},
	}
	// The same requests for objects of shard "7" of FencedShardSet "db",
	// whose messages name the shard; and a shard the set does not have.
	for _, tt := range tests[:len(tests):len(tests)] {
		r := tt.r
		r.Old, r.New = inShard(r.Old), inShard(r.New)
		tests = append(tests, struct {
			reason rules.Reason
			r      rules.Request
			lease  rules.Lease
		}{tt.reason, r, tt.lease})
	}
	tests = append(tests, struct {
		reason rules.Reason
		r      rules.Request
		lease  rules.Lease
	}{rules.ReasonUnknownShard, req(rules.Create, nil, inShard(obj("db", fence("41"))), holder), rules.Lease{NoShard: true}})
	g := NewWithT(t)
	covered := map[rules.Reason]bool{}
	for _, tt := range tests {
		d := rules.Decide(tt.r, tt.lease, rules.Principals{})
		g.Expect(d.Allowed).To(BeFalse(), "%s", tt.reason)
		g.Expect(d.Reason).To(Equal(tt.reason), "the request of the case does not produce its reason")
		msg := `admission webhook "protected.fencedlease.io" denied the request: ` + d.Message
		e, ok := explain(msg)
		g.Expect(ok).To(BeTrue(), "not recognized: %s", msg)
		g.Expect(e.reason).To(Equal(tt.reason), "message: %s", msg)
		covered[e.reason] = true
	}
	for _, e := range explanations {
		g.Expect(covered).To(HaveKey(e.reason), "explanation %s has no case", e.reason)
	}
	_, ok := explain(`admission webhook "something.else" denied the request: no`)
	g.Expect(ok).To(BeFalse())
}

// inShard puts a copy of the object in shard "7" of the set its
// protected-by label names.
func inShard(o *rules.Object) *rules.Object {
	if o == nil {
		return nil
	}
	c := *o
	c.Labels = map[string]string{fencingv1alpha1.LabelShard: "7"}
	for k, v := range o.Labels {
		c.Labels[k] = v
	}
	return &c
}
