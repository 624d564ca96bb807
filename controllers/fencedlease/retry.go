package fencedlease

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

const (
	// firstRetry is how soon to look again after another writer changed
	// the Lease or the FencedLease under us, or a cache was seen lagging
	// behind: usually the watch brings the newer object within a few
	// milliseconds.
	firstRetry = 10 * time.Millisecond
	// conflictRetry is the longest wait between such looks: the wait
	// doubles with every look in a row that finds the same.
	conflictRetry = 200 * time.Millisecond
)

// retries counts, per FencedLease, the looks in a row that found their
// inputs stale or their writes conflicting.
type retries struct {
	mu    sync.Mutex
	byKey map[types.NamespacedName]int
}

// next is how long to wait before the next look at key, and counts it.
func (rt *retries) next(key types.NamespacedName) time.Duration {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.byKey == nil {
		rt.byKey = map[types.NamespacedName]int{}
	}
	n := rt.byKey[key]
	rt.byKey[key] = n + 1
	return retryAfter(n)
}

// settled forgets the retries of key: a look found its inputs current.
func (rt *retries) settled(key types.NamespacedName) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	delete(rt.byKey, key)
}

// retryAfter is the wait before look n+1 in a row: firstRetry, doubling,
// up to conflictRetry.
func retryAfter(n int) time.Duration {
	d := firstRetry
	for range n {
		d *= 2
		if d >= conflictRetry {
			return conflictRetry
		}
	}
	return d
}
