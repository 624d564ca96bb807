package fencing

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	rules "github.com/fencedlease/fencedlease/internal/fencing"
)

// TestDecideOnLeaseTakesOnlyACommittedGrantOfThisFencedLease: a write with
// fence 43, above the status's 42, is decided on the Lease only when the
// Lease is controlled by the FencedLease and holds a committed grant with
// exactly that fence; then for the pod it names only.
func TestDecideOnLeaseTakesOnlyACommittedGrantOfThisFencedLease(t *testing.T) {
	fl := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "fl-uid"}}
	fl.Status.Fence = 42
	lease := func(mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedLease",
				Name: "db", UID: "fl-uid", Controller: ptr.To(true)}},
			Annotations: map[string]string{fencingv1alpha1.LeaseAnnotationState: "held", fencingv1alpha1.AnnotationFence: "43",
				fencingv1alpha1.LeaseAnnotationHolderUID: "b-uid"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b")}}
		if mutate != nil {
			mutate(l)
		}
		return l
	}
	write := func(pod types.UID) rules.Request {
		return rules.Request{Operation: rules.Update, Kind: "ConfigMap", Namespace: "ns", Name: "config",
			Old:    &rules.Object{Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}, Annotations: map[string]string{fencingv1alpha1.AnnotationFence: "42"}},
			New:    &rules.Object{Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}, Annotations: map[string]string{fencingv1alpha1.AnnotationFence: "43"}},
			Caller: rules.Caller{Username: "system:serviceaccount:ns:default", PodName: string(pod), PodUID: pod}}
	}
	for _, tc := range []struct {
		name   string
		lease  *coordinationv1.Lease
		caller types.UID
		want   rules.Reason
	}{
		{"the holder of the committed grant", lease(nil), "b-uid", rules.ReasonHolder},
		{"another pod", lease(nil), "a-uid", rules.ReasonNotHolder},
		{"no Lease", nil, "b-uid", rules.ReasonUnknownFence},
		{"a Lease the FencedLease does not control", lease(func(l *coordinationv1.Lease) { l.OwnerReferences = nil }), "b-uid", rules.ReasonUnknownFence},
		{"a Lease of an earlier FencedLease of the name", lease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "old" }), "b-uid", rules.ReasonUnknownFence},
		{"a pending grant", lease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "pending" }), "b-uid", rules.ReasonUnknownFence},
		{"a revoked grant", lease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "revoked" }), "b-uid", rules.ReasonUnknownFence},
		{"another fence", lease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.AnnotationFence] = "44" }), "b-uid", rules.ReasonUnknownFence},
		{"no holder", lease(func(l *coordinationv1.Lease) { delete(l.Annotations, fencingv1alpha1.LeaseAnnotationHolderUID) }), "b-uid", rules.ReasonUnknownFence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(coordinationv1.AddToScheme(scheme)).To(Succeed())
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tc.lease != nil {
				b = b.WithObjects(tc.lease)
			}
			h := &Handler{APIReader: b.Build()}
			r := write(tc.caller)
			status := rules.Lease{Found: true, Fence: 42, Holder: &rules.Holder{PodName: "a", PodUID: "a-uid"}}
			d := rules.Decide(r, status, true, rules.Principals{})
			g.Expect(d.Reason).To(Equal(rules.ReasonUnknownFence), "on the status alone")
			d, err := h.decideOnLease(context.Background(), r, d, fl)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Reason).To(Equal(tc.want))
			g.Expect(d.Allowed).To(Equal(tc.want == rules.ReasonHolder))
		})
	}
}
