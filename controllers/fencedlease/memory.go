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
type memory struct {
	// observation is the grant and its renewals as this process saw them,
	// on its monotonic clock (clock.go).
	observation
	// expired is set while the grant was found expired unrenewed and its
	// re-grant waits behind the renewals of the grants still held
	// (expiry.go).
	expired bool
	// written is what the API server returned for this process's last
	// write of the FencedLease (written.go).
	written *fencingv1alpha1.FencedLease
	// track is what the metrics need across reconciles (metrics.go).
	track leaseTrack
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
}

// memories are the memories of every FencedLease, created on first use and
// forgotten in one place (forget), with the looks in a row that found their
// inputs stale (retries).
type memories struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byKey map[types.NamespacedName]*memory
	// beat is what this process saw of the operator's heartbeat
	// (heartbeat.go); vouched are the FencedLeases whose held grant it
	// vouches for, with their lease durations, for its watchdog.
	beat    beatSeen
	vouched map[types.NamespacedName]time.Duration
	// wentBack is set when the store was found to have gone back in time,
	// until the heartbeat's watchdog wakes every FencedLease (regression.go).
	wentBack bool
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

// aheadOf says whether cache c of key may be ahead of the store.
func (m *memories) aheadOf(key types.NamespacedName, c cache) bool {
	var ahead bool
	m.with(key, func(mem *memory) { ahead = mem.ahead&c != 0 })
	return ahead
}

// caughtUp records that cache c of key holds nothing the store lost.
func (m *memories) caughtUp(key types.NamespacedName, c cache) {
	m.with(key, func(mem *memory) { mem.ahead &^= c })
}

func newMemories(c clock.PassiveClock) *memories {
	return &memories{clock: c, byKey: map[types.NamespacedName]*memory{}, vouched: map[types.NamespacedName]time.Duration{},
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

// with runs f on the memory of key, under the lock.
func (m *memories) with(key types.NamespacedName, f func(*memory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.get(key))
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
	delete(m.vouched, key)
	m.mu.Unlock()
	m.retries.Forget(key)
}

// retryAfter is how long to wait before the next look at key, and counts
// it.
func (m *memories) retryAfter(key types.NamespacedName) time.Duration { return m.retries.When(key) }

// settled resets the looks in a row of key: a look found its inputs current.
func (m *memories) settled(key types.NamespacedName) { m.retries.Forget(key) }

// setExpired remembers whether key's grant was found expired unrenewed and
// its re-grant waits behind the renewals of the grants still held
// (holder's behindRenewals gate).
func (m *memories) setExpired(key types.NamespacedName, expired bool) {
	m.with(key, func(mem *memory) { mem.expired = expired })
}

// expired tells whether key's re-grant waits behind the renewals.
func (m *memories) expired(key types.NamespacedName) (expired bool) {
	m.with(key, func(mem *memory) { expired = mem.expired })
	return expired
}
