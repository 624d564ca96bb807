package fences3

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// RecentOps is how many operations before the current one a pointer
// remembers, to recognise a replay or resolve a lost reply.
const RecentOps = 32

// maxPointerSize bounds what is read of a pointer document.
const maxPointerSize = 64 << 10

// Pointer is the content of a pointer object.
type Pointer struct {
	// Fence is the fence of the write that moved the pointer last.
	Fence int64 `json:"fence"`
	// Version is the key of the current version object.
	Version string `json:"version"`
	// OpID is the operation ID of that write.
	OpID string `json:"op"`
	// Seq counts the moves of the pointer: 1 for the first write.
	Seq int64 `json:"seq"`
	// Recent are the operation IDs of the moves before, newest first:
	// Recent[i] moved the pointer to sequence number Seq-1-i.
	Recent []string `json:"recent,omitempty"`
	// RecentFences are the fences of those moves: RecentFences[i] is the
	// fence Recent[i] wrote with. A pointer written before fences were
	// recorded has none; its entries match an operation of any fence.
	RecentFences []int64 `json:"recentFences,omitempty"`
}

// appliedAt reports whether operation opID moved the pointer to this state
// or to one of the RecentOps states before, and with which fence (0 for an
// entry of a pointer written before fences were recorded).
func (p Pointer) appliedAt(opID string) (fence int64, ok bool) {
	if p.OpID == opID {
		return p.Fence, true
	}
	for i, op := range p.Recent {
		if op == opID {
			if i < len(p.RecentFences) {
				return p.RecentFences[i], true
			}
			return 0, true
		}
	}
	return 0, false
}

// applied reports whether operation opID moved the pointer with this fence
// (or with a fence not recorded), among the moves it remembers.
func (p Pointer) applied(opID string, fence int64) bool {
	f, ok := p.appliedAt(opID)
	return ok && (f == fence || f == 0)
}

// next is the pointer after a write of version by opID with fence.
func (p Pointer) next(fence int64, version, opID string) Pointer {
	n := Pointer{Fence: fence, Version: version, OpID: opID, Seq: p.Seq + 1}
	if p.Seq > 0 {
		n.Recent = append([]string{p.OpID}, p.Recent...)
		if len(p.RecentFences) == len(p.Recent) {
			n.RecentFences = append([]int64{p.Fence}, p.RecentFences...)
		}
		if len(n.Recent) > RecentOps {
			n.Recent = n.Recent[:RecentOps]
		}
		if len(n.RecentFences) > RecentOps {
			n.RecentFences = n.RecentFences[:RecentOps]
		}
	}
	return n
}

// remembers reports whether the pointer still lists every move from
// sequence number seq on: only then does the absence of an operation from
// its record prove that the operation did not move it since.
func (p Pointer) remembers(seq int64) bool {
	return seq >= p.Seq-RecentOps
}

func (p Pointer) encode() ([]byte, error) { return json.Marshal(p) }

func decodePointer(key string, data []byte) (Pointer, error) {
	var p Pointer
	if err := json.Unmarshal(data, &p); err != nil {
		return Pointer{}, fmt.Errorf("pointer %s: %w: %w", key, ErrMalformedPointer, err)
	}
	if p.Fence <= 0 || p.Seq <= 0 || p.Version == "" || p.OpID == "" {
		return Pointer{}, fmt.Errorf("pointer %s: %w: fence %d, sequence %d, version %q, operation %q",
			key, ErrMalformedPointer, p.Fence, p.Seq, p.Version, p.OpID)
	}
	return p, nil
}

// VersionKey is the key of the version object that operation opID writes
// for the fenced object key under fence: the same for every attempt of the
// operation by the same grant, so that a retry cannot add a second version;
// another for each grant, so that what a stale holder left behind never
// stands in the way of the newer holder's write of the same operation.
func VersionKey(key, opID string, fence int64) string {
	return versionPrefix(key, opID) + strconv.FormatInt(fence, 10)
}

// versionPrefix is what the keys of every version of operation opID start
// with, whatever their fence.
func versionPrefix(key, opID string) string {
	sum := sha256.Sum256([]byte(opID))
	return key + ".versions/" + hex.EncodeToString(sum[:16]) + "-"
}
