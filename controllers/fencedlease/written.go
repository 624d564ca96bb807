package fencedlease

import (
	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// The memory of a FencedLease keeps what the API server returned for this
// process's last write of it, until the cache has seen that version.
//
// A grant is published by the reconcile after the one whose status patch
// records its fence, and that reconcile may start before the watch brings
// the patch into the cache. Read from the cache, the FencedLease would not
// record the fence yet: nothing would be published, and the same record
// would be computed again and patched on the old resourceVersion, to
// conflict. Its own write is newer than that cache and is what the API
// server stored at its version, so the reconcile reads it instead: a cache
// that has caught up with this one object, never a view ahead of the API
// server. Anything written by others after it is newer still and reaches
// the cache, which then replaces it.
//
// A kept copy goes at the next reconcile after the cache has caught up, so
// it costs at most one FencedLease per FencedLease, and mostly none: a held
// grant is reconciled at every renewal.

// remember keeps fl as returned by a successful write, without its
// managedFields, which the cache does not keep either: kept until the next
// reconcile, a copy is kept for most FencedLeases at any time (a held grant
// is reconciled once per refresh), and the field sets were the larger part
// of it (about 11 MB of the heap at ten thousand).
func (mem *memory) remember(fl *fencingv1alpha1.FencedLease) {
	own := fl.DeepCopy()
	own.ManagedFields = nil
	mem.written = own
}

// refresh makes fl, read from the cache, this process's own last write of
// it when that is newer (the same object, a later resourceVersion), and
// forgets the kept copy once the cache has caught up with it or the
// FencedLease is another one.
func (mem *memory) refresh(fl *fencingv1alpha1.FencedLease) {
	own := mem.written
	if own == nil {
		return
	}
	if own.UID == fl.UID && record.Newer(own.ResourceVersion, fl.ResourceVersion) {
		own.DeepCopyInto(fl)
		return
	}
	mem.written = nil
}
