package fencedlease

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// written keeps, per FencedLease, what the API server returned for this
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
type written struct {
	mu    sync.Mutex
	byKey map[types.NamespacedName]*fencingv1alpha1.FencedLease
}

// remember keeps fl as returned by a successful write.
func (w *written) remember(fl *fencingv1alpha1.FencedLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey == nil {
		w.byKey = map[types.NamespacedName]*fencingv1alpha1.FencedLease{}
	}
	w.byKey[types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}] = fl.DeepCopy()
}

// refresh replaces fl, as read from the cache, with this process's last
// write of it when that is newer; once the cache has seen the write, it is
// forgotten.
func (w *written) refresh(fl *fencingv1alpha1.FencedLease) {
	key := types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}
	w.mu.Lock()
	defer w.mu.Unlock()
	own, ok := w.byKey[key]
	if !ok {
		return
	}
	if own.UID == fl.UID {
		cmp, err := resourceversion.CompareResourceVersion(own.ResourceVersion, fl.ResourceVersion)
		if err == nil && cmp > 0 {
			own.DeepCopyInto(fl)
			return
		}
	}
	delete(w.byKey, key)
}

// forget drops what is kept for key: the FencedLease is gone, or a write
// found it changed by someone else.
func (w *written) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byKey, key)
}
