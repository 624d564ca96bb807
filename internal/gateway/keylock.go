package gateway

import (
	"context"
	"sync"
	"time"
)

// keyLocks serialises the writes to one key within this gateway process:
// with one replica, a key's check and write never interleave, whatever the
// store's ETags are. Entries live only while a write holds or waits for
// them, so memory is bounded by the writes in flight.
//
// A wait ends with the request (its context) or after its own timeout, so
// an abandoned request frees its in-flight slot at once. And a write of a
// newer grant does not wait behind an older grant's upload: it aborts it
// (preempt), unless the older one's last byte has gone to the store.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	refs int
	// token is full while the lock is held.
	token chan struct{}
	// upload is the holder's write in flight, fence its fence; waiting
	// are the fences of the admitted writes waiting.
	upload  *gate
	fence   int64
	waiting map[*int64]struct{}
}

// lockHandle is a held lock.
type lockHandle struct {
	k   *keyLocks
	key string
	l   *keyLock
}

// entry returns key's lock, counted as used.
func (k *keyLocks) entry(key string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{token: make(chan struct{}, 1), waiting: map[*int64]struct{}{}}
		k.locks[key] = l
	}
	l.refs++
	return l
}

// release forgets a use of key's lock.
func (k *keyLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}

// tryLock takes key's lock if it is free.
func (k *keyLocks) tryLock(key string) (*lockHandle, bool) {
	l := k.entry(key)
	select {
	case l.token <- struct{}{}:
		return &lockHandle{k, key, l}, true
	default:
		k.release(key, l)
		return nil, false
	}
}

// lock waits for key's lock, at most wait (no limit when 0) and no longer
// than ctx. fence is the waiting write's admitted fence: a holder's upload
// of a lower fence is preempted.
func (k *keyLocks) lock(ctx context.Context, key string, fence int64, wait time.Duration) (*lockHandle, error) {
	l := k.entry(key)
	mine := new(int64)
	*mine = fence
	k.mu.Lock()
	l.waiting[mine] = struct{}{}
	if l.upload != nil && l.fence < fence {
		l.upload.preempt(fence)
	}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(l.waiting, mine)
		k.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case l.token <- struct{}{}:
		return &lockHandle{k, key, l}, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	case <-timeout:
		k.release(key, l)
		return nil, context.DeadlineExceeded
	}
}

// holding says that the holder's write of fence is in flight as upload
// (nil when it is done): a waiting write of a higher fence preempts it,
// at once if one is waiting already.
func (h *lockHandle) holding(fence int64, upload *gate) {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	h.l.upload, h.l.fence = upload, fence
	if upload == nil {
		return
	}
	for w := range h.l.waiting {
		if *w > fence {
			upload.preempt(*w)
			return
		}
	}
}

// unlock releases the lock.
func (h *lockHandle) unlock() {
	h.k.mu.Lock()
	h.l.upload = nil
	h.k.mu.Unlock()
	<-h.l.token
	h.k.release(h.key, h.l)
}

// size is the number of keys with a write in flight.
func (k *keyLocks) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
