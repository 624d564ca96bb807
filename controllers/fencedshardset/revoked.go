package fencedshardset

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// revocations remembers, on this process's own clock, when it first saw
// each shard's revoked grant (its Lease at a resourceVersion): a Safe wait
// counts from there, never from the Lease's renewTime, which another
// replica's wall clock wrote. A replica that starts, or takes over from
// another, thus waits a whole lease duration from when it first sees a
// revocation, whatever the clocks' skew; the replica that revoked counts
// from its own write.
type revocations struct {
	mu   sync.Mutex
	seen map[string]revocation // by namespace/name of the Lease
}

type revocation struct {
	version string
	at      time.Time
}

// since returns when the revoked grant on l was first seen, recording now
// when it was not seen before.
func (r *revocations) since(l *coordinationv1.Lease, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]revocation{}
	}
	key := l.Namespace + "/" + l.Name
	if v, ok := r.seen[key]; ok && v.version == l.ResourceVersion {
		return v.at
	}
	r.seen[key] = revocation{version: l.ResourceVersion, at: now}
	return now
}

// forget drops what is remembered of a shard whose grant is not revoked.
func (r *revocations) forget(l *coordinationv1.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, l.Namespace+"/"+l.Name)
}
