package fencedlease

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func writtenFL(uid, rv string, fence int64) *fencingv1alpha1.FencedLease {
	return &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: types.UID(uid), ResourceVersion: rv},
		Status:     fencingv1alpha1.FencedLeaseStatus{Fence: fence},
	}
}

// kept is the memories of one FencedLease as its reconciles use them: each
// loads the memory, changes it, and stores it back.
type kept struct {
	m   *memories
	key types.NamespacedName
}

func newKept() kept {
	return kept{m: newMemories(clock.RealClock{}), key: types.NamespacedName{Namespace: "ns", Name: "db"}}
}

func (k kept) remember(fl *fencingv1alpha1.FencedLease) {
	mem := k.m.load(k.key)
	mem.remember(fl)
	k.m.store(mem)
}

func (k kept) refresh(fl *fencingv1alpha1.FencedLease) {
	mem := k.m.load(k.key)
	mem.refresh(fl)
	k.m.store(mem)
}

func (k kept) forget() { k.m.forget(k.key) }

func TestWrittenServesOwnWriteUntilTheCacheHasIt(t *testing.T) {
	w := newKept()
	w.remember(writtenFL("u1", "20", 20))

	cached := writtenFL("u1", "10", 10)
	w.refresh(cached)
	if cached.ResourceVersion != "20" || cached.Status.Fence != 20 {
		t.Fatalf("a cache older than the write: got resourceVersion %s fence %d, want the write (20, 20)", cached.ResourceVersion, cached.Status.Fence)
	}
	cached.Status.Fence = 99 // a reconcile changes its copy, never what is kept
	again := writtenFL("u1", "10", 10)
	w.refresh(again)
	if again.Status.Fence != 20 {
		t.Fatalf("what is kept changed with a reconcile's copy: fence %d", again.Status.Fence)
	}

	caught := writtenFL("u1", "20", 20)
	w.refresh(caught)
	older := writtenFL("u1", "10", 10)
	w.refresh(older)
	if older.ResourceVersion != "10" {
		t.Fatalf("once the cache has the write it is forgotten; got resourceVersion %s", older.ResourceVersion)
	}

	w.remember(writtenFL("u1", "30", 30))
	newer := writtenFL("u1", "40", 40)
	w.refresh(newer)
	if newer.ResourceVersion != "40" {
		t.Fatalf("a cache newer than the write is read as it is; got %s", newer.ResourceVersion)
	}

	w.remember(writtenFL("u1", "50", 50))
	recreated := writtenFL("u2", "45", 0)
	w.refresh(recreated)
	if recreated.UID != "u2" || recreated.Status.Fence != 0 {
		t.Fatalf("a write of an earlier object of the same name replaced the one cached: %+v", recreated.ObjectMeta)
	}

	w.remember(writtenFL("u2", "60", 60))
	w.forget()
	plain := writtenFL("u2", "55", 55)
	w.refresh(plain)
	if plain.ResourceVersion != "55" {
		t.Fatalf("a forgotten write was served: %s", plain.ResourceVersion)
	}
}

// TestWrittenKeepsNoManagedFields: the copy kept of a write leaves out its
// managedFields, as the cache does; the write itself keeps them.
func TestWrittenKeepsNoManagedFields(t *testing.T) {
	w := newKept()
	fl := writtenFL("u1", "20", 20)
	fl.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "fencedlease", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:fence":{}}}`)}}
	w.remember(fl)
	if len(fl.ManagedFields) != 1 {
		t.Fatal("remember changed the write it was given")
	}
	cached := writtenFL("u1", "10", 10)
	w.refresh(cached)
	if cached.ResourceVersion != "20" || cached.ManagedFields != nil {
		t.Fatalf("kept copy: resourceVersion %s, managedFields %v; want 20 and none", cached.ResourceVersion, cached.ManagedFields)
	}
}
