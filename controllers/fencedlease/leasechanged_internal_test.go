package fencedlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// TestLeaseChanged: the Lease watch's predicate drops an update that
// changes only spec.renewTime of a grant the operator renews, and lets
// every other update through: a holder's renewal (renewal Holder), and a
// change of anything else the operator reads. The envtest side is
// TestRenewTimeOnlyLeaseUpdateStartsNoReconcile.
func TestLeaseChanged(t *testing.T) {
	at := func(s int) *metav1.MicroTime {
		return ptr.To(metav1.NewMicroTime(time.Date(2026, 12, 1, 10, 0, s, 0, time.UTC)))
	}
	held := func(renewal fencingv1alpha1.RenewalMode) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", ResourceVersion: "10",
				Annotations: map[string]string{
					fencingv1alpha1.LeaseAnnotationState:     "held",
					fencingv1alpha1.LeaseAnnotationHolderUID: "uid-a",
					fencingv1alpha1.AnnotationFence:          "9",
					fencingv1alpha1.LeaseAnnotationRenewal:   string(renewal),
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedLease",
					Name: "db", UID: "uid-db", Controller: ptr.To(true)}},
				Finalizers: []string{fencingv1alpha1.LeaseFinalizer}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: at(0), RenewTime: at(0), LeaseTransitions: ptr.To[int32](1)},
		}
	}
	for _, tc := range []struct {
		name    string
		renewal fencingv1alpha1.RenewalMode
		change  func(*coordinationv1.Lease)
		want    bool
		// deleting marks the old Lease as being deleted already.
		deleting bool
	}{
		{"renewTime alone, renewal Operator", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.RenewTime = at(5) }, false, false},
		{"renewTime alone, no renewal recorded (read as Operator)", "",
			func(l *coordinationv1.Lease) { l.Spec.RenewTime = at(5) }, false, false},
		{"nothing but the resourceVersion", fencingv1alpha1.RenewalOperator,
			func(*coordinationv1.Lease) {}, false, false},
		{"renewTime alone, renewal Holder", fencingv1alpha1.RenewalHolder,
			func(l *coordinationv1.Lease) { l.Spec.RenewTime = at(5) }, true, false},
		{"renewTime and the holder", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.RenewTime, l.Spec.HolderIdentity = at(5), ptr.To("b") }, true, false},
		{"the holder", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") }, true, false},
		{"acquireTime", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.AcquireTime = at(5) }, true, false},
		{"leaseTransitions", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](2) }, true, false},
		{"leaseDurationSeconds", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](20) }, true, false},
		{"the state annotation", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "revoked" }, true, false},
		{"the fence annotation, with renewTime", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) {
				l.Annotations[fencingv1alpha1.AnnotationFence], l.Spec.RenewTime = "12", at(5)
			}, true, false},
		{"an annotation of someone else", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Annotations["example.com/note"] = "x" }, true, false},
		{"the owner", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "uid-db-2" }, true, false},
		{"deleted", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.DeletionTimestamp = ptr.To(metav1.Now()) }, true, false},
		{"renewTime alone, on a Lease being deleted", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Spec.RenewTime = at(5) }, false, true},
		{"a label, which the operator does not read", fencingv1alpha1.RenewalOperator,
			func(l *coordinationv1.Lease) { l.Labels = map[string]string{"example.com/team": "db"} }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := held(tc.renewal)
			if tc.renewal == "" {
				delete(old.Annotations, fencingv1alpha1.LeaseAnnotationRenewal)
			}
			if tc.deleting {
				old.DeletionTimestamp = ptr.To(metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 1, 0, time.UTC)))
			}
			updated := old.DeepCopy()
			updated.ResourceVersion = "11"
			tc.change(updated)
			if got := leaseChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated}); got != tc.want {
				t.Errorf("leaseChanged() = %v, want %v", got, tc.want)
			}
		})
	}
}
