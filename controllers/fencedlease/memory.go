package fencedlease

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// memory is what this process remembers of one FencedLease between its
// reconciles. All of it is a cache of what the API server holds or of what
// this process saw happen, none of it a record: a process that starts with
// none of it (a restart, another replica) is as safe, and waits longer.
//
// A reconcile loads it at its start, as a plain value of its own, and
// stores it back at its end (memories.load, memories.store): only one
// reconcile of a FencedLease runs at a time, so nothing in between needs a
// lock.
type memory struct {
	// observation is the grant and its renewals as this process saw them,
	// on its monotonic clock (clock.go).
	observation
	// expired is set while the grant was found expired unrenewed and its
	// re-grant waits behind the renewals of the grants still held
	// (Plan.Behind).
	expired bool
	// written is what the API server returned for this process's last
	// write of the FencedLease (written.go).
	written *fencingv1alpha1.FencedLease
	// refusal is the last grant refused for a fence regression
	// (regression.go).
	refusal *refusal
	// ahead are the caches that may hold versions the API server's store
	// does not have: it went back in time (a restore, storeWentBack). Each
	// is read around, from the API server, until it catches up: the
	// Lease's (regression.go), the FencedLease's, whose status patches
	// planned on a lost version would conflict (regression.go), and the
	// pods', whose writes carry the versions read (inputs.go).
	ahead cache
	// published is this process's last publication of a holder, with the
	// pod's resourceVersion it wrote (publish.go).
	published ownPublication
	// vouchedFor is the lease duration of the held grant that the heartbeat
	// vouches for, 0 when it vouches for none; stored, it tells the
	// heartbeat's watchdog (memories.vouched).
	vouchedFor time.Duration
	// loaded is where a reconcile's copy came from (load); nil in the
	// memories themselves.
	loaded *loaded
}

// memories are the memories of every FencedLease, created on first use and
// forgotten in one place (forget), with what the process keeps beside
// them: the heartbeat, the metrics' series, and the looks in a row that
// found their inputs stale (retries).
type memories struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byKey map[types.NamespacedName]*memory
	// wentBack counts the times the store was found to have gone back in
	// time by the heartbeat, which marks every memory (sawStoreGoBack); a
	// memory loaded before the last of them is marked as it is stored.
	wentBack uint64
	// woken is set when the store was found to have gone back, until the
	// heartbeat's watchdog wakes every FencedLease (regression.go).
	woken bool
	// tracks are what the metrics need of each FencedLease across
	// reconciles (metrics.go): read by the metrics endpoint and the
	// heartbeat's watchdog, so they stay under the lock.
	tracks map[types.NamespacedName]*leaseTrack
	// beat is what this process saw of the operator's heartbeat
	// (heartbeat.go); vouched are the FencedLeases whose held grant it
	// vouches for, with their lease durations, for its watchdog: each
	// memory's vouchedFor, as last stored.
	beat    beatSeen
	vouched map[types.NamespacedName]time.Duration
	// retries paces the looks again after a conflict or a lagging cache:
	// firstRetry, doubling with every such look in a row, up to
	// conflictRetry; a look that finds its inputs current resets it.
	retries workqueue.TypedRateLimiter[types.NamespacedName]
}

// cache names one of the caches a reconcile reads.
type cache uint8

const (
	leaseCache cache = 1 << iota
	fencedLeaseCache
	podCache
)

// storeWentBack records that every cache may be ahead of a store that went
// back in time, and forgets this process's own last publication, whose
// version the store may have lost: the one state that both ways of finding
// it (a conflict, checkCacheAhead; the heartbeat, sawStoreGoBack) set.
func (mem *memory) storeWentBack() {
	mem.ahead, mem.published = leaseCache|fencedLeaseCache|podCache, ownPublication{}
}

// isAhead says whether cache c may be ahead of the store.
func (mem *memory) isAhead(c cache) bool { return mem.ahead&c != 0 }

// caughtUp records that cache c holds nothing the store lost.
func (mem *memory) caughtUp(c cache) { mem.ahead &^= c }

func newMemories(c clock.PassiveClock) *memories {
	return &memories{clock: c, byKey: map[types.NamespacedName]*memory{}, vouched: map[types.NamespacedName]time.Duration{},
		tracks:  map[types.NamespacedName]*leaseTrack{},
		retries: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](firstRetry, conflictRetry)}
}

// get returns the memory of key, created when there is none; m.mu must be
// held.
func (m *memories) get(key types.NamespacedName) *memory {
	mem := m.byKey[key]
	if mem == nil {
		mem = &memory{}
		m.byKey[key] = mem
	}
	return mem
}

// track returns the metrics' track of key, created when there is none;
// m.mu must be held.
func (m *memories) track(key types.NamespacedName) *leaseTrack {
	tr := m.tracks[key]
	if tr == nil {
		tr = &leaseTrack{}
		m.tracks[key] = tr
	}
	return tr
}

// loaded is where a reconcile's copy of a memory came from.
type loaded struct {
	key  types.NamespacedName
	from *memory
	// wentBack is memories.wentBack as of the copy.
	wentBack uint64
}

// load returns a copy of key's memory for one reconcile to use and change
// without a lock, until it stores it back.
func (m *memories) load(key types.NamespacedName) *memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := m.get(key)
	mem := *from
	mem.loaded = &loaded{key: key, from: from, wentBack: m.wentBack}
	return &mem
}

// catchUp marks a loaded memory as the heartbeat marked every memory since
// it was loaded: the store went back in time.
func (m *memories) catchUp(mem *memory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.catchUpLocked(mem)
}

func (m *memories) catchUpLocked(mem *memory) {
	if mem.loaded.wentBack != m.wentBack {
		mem.storeWentBack()
		mem.loaded.wentBack = m.wentBack
	}
}

// store puts back the memory a reconcile loaded, marked as the heartbeat
// marked every memory meanwhile. A memory forgotten meanwhile (the
// FencedLease is gone) stays forgotten.
func (m *memories) store(mem *memory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := mem.loaded
	if m.byKey[at.key] != at.from {
		return
	}
	m.catchUpLocked(mem)
	*at.from = *mem
	at.from.loaded = nil
	if mem.vouchedFor > 0 {
		m.vouched[at.key] = mem.vouchedFor
	} else {
		delete(m.vouched, at.key)
	}
}

// forget forgets everything this process keeps of key: its memory (with
// its metric series and its looks in a row) and its turn for a first
// grant. The FencedLease is gone; this is the one place that ends them.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.mem.forget(key)
	r.pace.forget(key)
}

// forget forgets the memory of key, its metric series with it (see
// Reconciler.forget).
func (m *memories) forget(key types.NamespacedName) {
	m.mu.Lock()
	delete(m.byKey, key)
	delete(m.tracks, key)
	delete(m.vouched, key)
	m.mu.Unlock()
	m.retries.Forget(key)
}

// retryAfter is how long to wait before the next look at key, and counts
// it.
func (m *memories) retryAfter(key types.NamespacedName) time.Duration { return m.retries.When(key) }

// settled resets the looks in a row of key: a look found its inputs current.
func (m *memories) settled(key types.NamespacedName) { m.retries.Forget(key) }
