package fencedshardset

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// The Safe wait counts from the first sight of a revocation at its
// resourceVersion; a newer version of the Lease starts the count again.
func TestRevocationsCountFromTheFirstSight(t *testing.T) {
	var r revocations
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "work-0", ResourceVersion: "10"}}
	t0 := time.Unix(1000, 0)
	if got := r.since(l, t0); !got.Equal(t0) {
		t.Fatalf("first sight of Lease ns/work-0 at 10: since = %v, want %v", got, t0)
	}
	if got := r.since(l, t0.Add(5*time.Second)); !got.Equal(t0) {
		t.Fatalf("second sight of Lease ns/work-0 at 10: since = %v, want the first sight %v", got, t0)
	}
	l.ResourceVersion = "11"
	if got := r.since(l, t0.Add(6*time.Second)); !got.Equal(t0.Add(6 * time.Second)) {
		t.Fatalf("Lease ns/work-0 written again (11): since = %v, want the new sight %v", got, t0.Add(6*time.Second))
	}
}

// A Lease the set deletes (it shrank, or is being deleted) is forgotten by
// the revocation clock: a set that shrinks and grows again, or many sets
// created and deleted, leave nothing behind in the operator's memory.
func TestDeletedLeasesAreForgotten(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "work-3"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(l).Build()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(l), l); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c}
	r.revoked.since(l, time.Now())
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "work"}}
	s := &scope{set: set, orphans: []*coordinationv1.Lease{l}}
	if err := r.retireOrphans(context.Background(), s); err != nil {
		t.Fatalf("retire the orphaned Lease ns/work-3: %v", err)
	}
	if err := r.deleteRetired(context.Background(), s); err != nil {
		t.Fatalf("delete the orphaned Lease ns/work-3: %v", err)
	}
	if n := len(r.revoked.seen); n != 0 {
		t.Fatalf("the revocation clock still remembers %d Leases after Lease ns/work-3 was deleted", n)
	}
}
