package gateway

import (
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func heldLease(mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "exporter",
			Annotations: map[string]string{
				fencingv1alpha1.LeaseAnnotationState:     fencingv1alpha1.LeaseStateHeld,
				fencingv1alpha1.AnnotationFence:          "42",
				fencingv1alpha1.LeaseAnnotationHolderUID: "uid-b",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "fencing.fencedlease.io/v1alpha1", Kind: "FencedLease", Name: "exporter",
				UID: "fl-uid", Controller: ptr.To(true)}},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b")},
	}
	if mutate != nil {
		mutate(l)
	}
	return l
}

func TestReadGrant(t *testing.T) {
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		want    Grant
		wantErr string
	}{
		{name: "held", lease: heldLease(nil), want: Grant{Fence: 42, HolderPod: "b", HolderUID: "uid-b", OwnerUID: "fl-uid"}},
		{name: "missing", lease: nil, wantErr: "the Lease exporter does not exist"},
		{name: "pending", lease: heldLease(func(l *coordinationv1.Lease) {
			l.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStatePending
		}),
			wantErr: "the Lease billing/exporter has no committed grant (state pending)"},
		{name: "revoked", lease: heldLease(func(l *coordinationv1.Lease) {
			l.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStateRevoked
		}),
			wantErr: "the Lease billing/exporter has no committed grant (state revoked)"},
		{name: "released", lease: heldLease(func(l *coordinationv1.Lease) {
			l.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStateReleased
		}),
			wantErr: "the Lease billing/exporter has no committed grant (state released)"},
		{name: "no state", lease: heldLease(func(l *coordinationv1.Lease) { delete(l.Annotations, fencingv1alpha1.LeaseAnnotationState) }),
			wantErr: "the Lease billing/exporter has no committed grant (state none)"},
		{name: "leading zero fence", lease: heldLease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.AnnotationFence] = "042" }),
			wantErr: `the Lease billing/exporter: invalid fence "042": leading zero`},
		{name: "no fence", lease: heldLease(func(l *coordinationv1.Lease) { delete(l.Annotations, fencingv1alpha1.AnnotationFence) }),
			wantErr: `the Lease billing/exporter: invalid fence "": empty`},
		{name: "no holder UID", lease: heldLease(func(l *coordinationv1.Lease) { delete(l.Annotations, fencingv1alpha1.LeaseAnnotationHolderUID) }),
			wantErr: `the Lease billing/exporter is held without a holder pod (name "b", UID "")`},
		{name: "no holder identity", lease: heldLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }),
			wantErr: `the Lease billing/exporter is held without a holder pod (name "", UID "uid-b")`},
		{name: "no owner", lease: heldLease(func(l *coordinationv1.Lease) { l.OwnerReferences = nil }),
			wantErr: "the Lease billing/exporter is not controlled by FencedLease exporter"},
		{name: "owner not controller", lease: heldLease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].Controller = nil }),
			wantErr: "the Lease billing/exporter is not controlled by FencedLease exporter"},
		{name: "owner of another kind", lease: heldLease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].Kind = "Deployment" }),
			wantErr: "the Lease billing/exporter is not controlled by FencedLease exporter"},
		{name: "owner of another group", lease: heldLease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].APIVersion = "example.com/v1" }),
			wantErr: "the Lease billing/exporter is not controlled by FencedLease exporter"},
		{name: "owner of another name", lease: heldLease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].Name = "other" }),
			wantErr: "the Lease billing/exporter is not controlled by FencedLease exporter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ReadGrant(tc.lease, "exporter")
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(got).To(BeZero())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
