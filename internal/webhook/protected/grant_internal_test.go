package protected

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

func fencedLease(uid types.UID, fence int64) *fencingv1alpha1.FencedLease {
	fl := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: uid}}
	fl.Status.Fence = fence
	return fl
}

// grantLease is the Lease of FencedLease db (UID fl-uid) with a grant held
// by pod b with fence 43, changed by mutate.
func grantLease(mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
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

// TestGrantOn: only a committed grant that is held, on a Lease the
// FencedLease controls, names a holder; the fence is the last committed one
// and never below the status's.
func TestGrantOn(t *testing.T) {
	b := &fencing.Holder{PodName: "b", PodUID: "b-uid"}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		fl    *fencingv1alpha1.FencedLease
		want  fencing.Lease
	}{
		{"held, status not recorded yet", grantLease(nil), fencedLease("fl-uid", 42), fencing.Lease{Found: true, Fence: 43, Holder: b}},
		{"held, recorded", grantLease(nil), fencedLease("fl-uid", 43), fencing.Lease{Found: true, Fence: 43, Holder: b}},
		{"pending: the old grant is superseded", grantLease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "pending" }),
			fencedLease("fl-uid", 43), fencing.Lease{Found: true, Fence: 43}},
		{"revoked", grantLease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "revoked" }),
			fencedLease("fl-uid", 43), fencing.Lease{Found: true, Fence: 43}},
		{"released", grantLease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "released" }),
			fencedLease("fl-uid", 43), fencing.Lease{Found: true, Fence: 43}},
		{"not controlled by this FencedLease", grantLease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "old" }),
			fencedLease("fl-uid", 42), fencing.Lease{Found: true, Fence: 43}},
		{"no owner", grantLease(func(l *coordinationv1.Lease) { l.OwnerReferences = nil }),
			fencedLease("fl-uid", 42), fencing.Lease{Found: true, Fence: 43}},
		{"no holder UID", grantLease(func(l *coordinationv1.Lease) { delete(l.Annotations, fencingv1alpha1.LeaseAnnotationHolderUID) }),
			fencedLease("fl-uid", 42), fencing.Lease{Found: true, Fence: 43}},
		{"malformed fence", grantLease(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.AnnotationFence] = "043" }),
			fencedLease("fl-uid", 42), fencing.Lease{Found: true, Fence: 42}},
		{"status ahead of the Lease (a Lease re-created from an older record)", grantLease(nil),
			fencedLease("fl-uid", 44), fencing.Lease{Found: true, Fence: 44}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(grantOn(tc.lease, tc.fl)).To(Equal(tc.want))
		})
	}
}

// TestCurrentGrantReadsTheLeaseFromTheAPIServer: the grant comes from the
// Lease as the API server has it, whatever the cache shows; a FencedLease
// the cache has not seen, or not in the version that controls the Lease
// (deleted and created again), is read from the API server.
func TestCurrentGrantReadsTheLeaseFromTheAPIServer(t *testing.T) {
	scheme := runtime.NewScheme()
	g := NewWithT(t)
	g.Expect(coordinationv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(fencingv1alpha1.AddToScheme(scheme)).To(Succeed())
	build := func(objs ...client.Object) client.Reader {
		return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	}
	b := &fencing.Holder{PodName: "b", PodUID: "b-uid"}
	for _, tc := range []struct {
		name       string
		cache, api []client.Object
		want       fencing.Lease
		wantUID    types.UID
	}{
		{"cache lags behind the grant", []client.Object{fencedLease("fl-uid", 41)},
			[]client.Object{fencedLease("fl-uid", 42), grantLease(nil)}, fencing.Lease{Found: true, Fence: 43, Holder: b}, "fl-uid"},
		{"not in the cache yet", nil, []client.Object{fencedLease("fl-uid", 42), grantLease(nil)},
			fencing.Lease{Found: true, Fence: 43, Holder: b}, "fl-uid"},
		{"created again: the cache has the old one", []client.Object{fencedLease("old-uid", 40)},
			[]client.Object{fencedLease("fl-uid", 42), grantLease(nil)}, fencing.Lease{Found: true, Fence: 43, Holder: b}, "fl-uid"},
		{"deleted: the cache still has it, the Lease is gone", []client.Object{fencedLease("fl-uid", 42)}, nil,
			fencing.Lease{Found: true, Fence: 42}, "fl-uid"},
		{"gone everywhere", nil, nil, fencing.Lease{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h := &Handler{Cache: build(tc.cache...), APIReader: build(tc.api...)}
			fl, got, err := h.currentGrant(context.Background(), "ns", "db")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			if tc.wantUID == "" {
				g.Expect(fl).To(BeNil())
				return
			}
			g.Expect(fl.UID).To(Equal(tc.wantUID))
		})
	}
}
