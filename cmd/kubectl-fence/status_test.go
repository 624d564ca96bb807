package main

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// The status may record a renewal minutes old (the operator under load):
// the time left comes from the FencedLease's own Lease when that carries a
// later renewal of the same holder, and from the status otherwise.
func TestExpiresInTakesTheLeasesLaterRenewal(t *testing.T) {
	now := time.Unix(10000, 0)
	fl := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", UID: types.UID("fl-uid")}}
	fl.Status.Holder = &fencingv1alpha1.HolderRef{PodName: "a"}
	fl.Status.ExpireTime = &metav1.MicroTime{Time: now.Add(-2 * time.Minute)}
	lease := func(holder string, renewed time.Time, owner types.UID) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedLease", Name: "db", UID: owner, Controller: ptr.To(true)}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  string
	}{
		{"no Lease readable", nil, "expired 2m0s ago"},
		{"renewed since the status recorded it", lease("a", now.Add(-5*time.Second), "fl-uid"), "10s"},
		{"another holder's", lease("b", now.Add(-5*time.Second), "fl-uid"), "expired 2m0s ago"},
		{"not this FencedLease's", lease("a", now.Add(-5*time.Second), "other-uid"), "expired 2m0s ago"},
		{"older than the status", lease("a", now.Add(-10*time.Minute), "fl-uid"), "expired 2m0s ago"},
	} {
		if got := expiresIn(fl, tc.lease, now); got != tc.want {
			t.Errorf("%s: expiresIn = %q, want %q", tc.name, got, tc.want)
		}
	}
}
