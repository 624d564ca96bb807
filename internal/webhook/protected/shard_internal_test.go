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

// shardSet is FencedShardSet billing (UID uid) with n shards.
func shardSet(uid types.UID, n int32) *fencingv1alpha1.FencedShardSet {
	return &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "billing", UID: uid},
		Spec: fencingv1alpha1.FencedShardSetSpec{Shards: n}}
}

// shardLeaseOf is the Lease billing-7 of shard "7" of set billing (UID
// set-uid), held by pod b with fence 43, changed by mutate.
func shardLeaseOf(mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "billing-7",
		Labels: map[string]string{fencingv1alpha1.LabelShardSet: "billing", fencingv1alpha1.LabelShard: "7"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedShardSet",
			Name: "billing", UID: "set-uid", Controller: ptr.To(true)}},
		Annotations: map[string]string{fencingv1alpha1.LeaseAnnotationState: "held", fencingv1alpha1.AnnotationFence: "43",
			fencingv1alpha1.LeaseAnnotationHolderUID: "b-uid"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b")}}
	if mutate != nil {
		mutate(l)
	}
	return l
}

// TestIsShard: a set of n shards has the keys "0" to "n-1" as the operator
// writes them, and nothing that merely parses to one of them; a set of keys
// has exactly those.
func TestIsShard(t *testing.T) {
	g := NewWithT(t)
	counted := shardSet("u", 64)
	for _, key := range []string{"0", "7", "63"} {
		g.Expect(isShard(counted, key)).To(BeTrue(), key)
	}
	for _, key := range []string{"64", "65", "-1", "07", "+7", "-0", "00", " 7", "7 ", "0x7", "7.0", "", "a", "٧", "99999999999999999999"} {
		g.Expect(isShard(counted, key)).To(BeFalse(), "%q", key)
	}
	keyed := &fencingv1alpha1.FencedShardSet{Spec: fencingv1alpha1.FencedShardSetSpec{Keys: []string{"eu", "us", "7"}}}
	for _, key := range []string{"eu", "us", "7"} {
		g.Expect(isShard(keyed, key)).To(BeTrue(), key)
	}
	for _, key := range []string{"0", "EU", "e", "", "asia"} {
		g.Expect(isShard(keyed, key)).To(BeFalse(), "%q", key)
	}
}

// TestShardGrantOn: only a committed grant that is held, on a Lease the set
// controls, names an owner; the fence is the record's, whatever the state.
func TestShardGrantOn(t *testing.T) {
	b := &fencing.Holder{PodName: "b", PodUID: "b-uid"}
	set := shardSet("set-uid", 64)
	state := func(s string) func(*coordinationv1.Lease) {
		return func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = s }
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  fencing.Lease
	}{
		{"held", shardLeaseOf(nil), fencing.Lease{Found: true, Fence: 43, Holder: b}},
		{"pending: the old grant is superseded", shardLeaseOf(state("pending")), fencing.Lease{Found: true, Fence: 43}},
		{"revoked", shardLeaseOf(state("revoked")), fencing.Lease{Found: true, Fence: 43}},
		{"released", shardLeaseOf(state("released")), fencing.Lease{Found: true, Fence: 43}},
		{"not controlled by this set", shardLeaseOf(func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "old" }), fencing.Lease{Found: true, Fence: 43}},
		{"owned, not controlled", shardLeaseOf(func(l *coordinationv1.Lease) { l.OwnerReferences[0].Controller = nil }), fencing.Lease{Found: true, Fence: 43}},
		{"no owner", shardLeaseOf(func(l *coordinationv1.Lease) { l.OwnerReferences = nil }), fencing.Lease{Found: true, Fence: 43}},
		{"no holder UID", shardLeaseOf(func(l *coordinationv1.Lease) { delete(l.Annotations, fencingv1alpha1.LeaseAnnotationHolderUID) }),
			fencing.Lease{Found: true, Fence: 43}},
		{"malformed fence", shardLeaseOf(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.AnnotationFence] = "043" }), fencing.Lease{Found: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(shardGrantOn(tc.lease, set)).To(Equal(tc.want))
		})
	}
}

// TestShardGrantReadsTheLeaseFromTheAPIServer: the grant of a shard comes
// from its Lease as the API server has it, never from the cache; a set the
// cache has not seen, has without the shard, or has in a version that does
// not control the Lease (deleted and created again) is read from the API
// server; a key that is no shard of the set is told apart from a set that
// does not exist.
func TestShardGrantReadsTheLeaseFromTheAPIServer(t *testing.T) {
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
		shard      string
		cache, api []client.Object
		want       fencing.Lease
		wantUID    types.UID
	}{
		{"held", "7", []client.Object{shardSet("set-uid", 64)}, []client.Object{shardSet("set-uid", 64), shardLeaseOf(nil)},
			fencing.Lease{Found: true, Fence: 43, Holder: b}, "set-uid"},
		{"the Lease in the cache only is not read", "7", []client.Object{shardSet("set-uid", 64), shardLeaseOf(nil)}, []client.Object{shardSet("set-uid", 64)},
			fencing.Lease{Found: true}, "set-uid"},
		{"not granted yet: no Lease", "8", []client.Object{shardSet("set-uid", 64)}, []client.Object{shardSet("set-uid", 64), shardLeaseOf(nil)},
			fencing.Lease{Found: true}, "set-uid"},
		{"not in the cache yet", "7", nil, []client.Object{shardSet("set-uid", 64), shardLeaseOf(nil)},
			fencing.Lease{Found: true, Fence: 43, Holder: b}, "set-uid"},
		{"the cache has it without the shard", "7", []client.Object{shardSet("set-uid", 4)}, []client.Object{shardSet("set-uid", 64), shardLeaseOf(nil)},
			fencing.Lease{Found: true, Fence: 43, Holder: b}, "set-uid"},
		{"created again: the cache has the old one", "7", []client.Object{shardSet("old-uid", 64)}, []client.Object{shardSet("set-uid", 64), shardLeaseOf(nil)},
			fencing.Lease{Found: true, Fence: 43, Holder: b}, "set-uid"},
		{"a Lease the set does not control", "7", []client.Object{shardSet("set-uid", 64)},
			[]client.Object{shardSet("set-uid", 64), shardLeaseOf(func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "old-uid" })},
			fencing.Lease{Found: true, Fence: 43}, "set-uid"},
		{"no such shard", "64", []client.Object{shardSet("set-uid", 64)}, []client.Object{shardSet("set-uid", 64)},
			fencing.Lease{NoShard: true}, "set-uid"},
		{"no such shard, whatever Lease of its name exists", "64", []client.Object{shardSet("set-uid", 64)},
			[]client.Object{shardSet("set-uid", 64), shardLeaseOf(func(l *coordinationv1.Lease) { l.Name = "billing-64" })},
			fencing.Lease{NoShard: true}, "set-uid"},
		{"deleted: the cache still has it, the API server has neither set nor Lease", "7", []client.Object{shardSet("set-uid", 64)}, nil,
			fencing.Lease{Found: true}, "set-uid"},
		{"gone everywhere", "7", nil, []client.Object{shardLeaseOf(nil)}, fencing.Lease{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h := &Handler{Cache: build(tc.cache...), APIReader: build(tc.api...)}
			grantor, got, err := h.grant(context.Background(), "ns", fencing.Protector{Name: "billing", Sharded: true, Shard: tc.shard})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			if tc.wantUID == "" {
				g.Expect(grantor).To(BeNil(), "no typed nil: no Event on a set that does not exist")
				return
			}
			g.Expect(grantor).To(BeAssignableToTypeOf(&fencingv1alpha1.FencedShardSet{}))
			g.Expect(grantor.GetUID()).To(Equal(tc.wantUID))
		})
	}
}
