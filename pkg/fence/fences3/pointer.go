package fences3

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
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
}

// applied reports whether opID moved the pointer to this state or to one of
// the RecentOps states before.
func (p Pointer) applied(opID string) bool {
	return p.OpID == opID || slices.Contains(p.Recent, opID)
}

// next is the pointer after a write of version by opID with fence.
func (p Pointer) next(fence int64, version, opID string) Pointer {
	n := Pointer{Fence: fence, Version: version, OpID: opID, Seq: p.Seq + 1}
	if p.Seq > 0 {
		n.Recent = append([]string{p.OpID}, p.Recent...)
		if len(n.Recent) > RecentOps {
			n.Recent = n.Recent[:RecentOps]
		}
	}
	return n
}

// remembers reports whether the pointer would still list a write that
// moved it to sequence number seq.
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
// for the fenced object key: the same for every attempt of the operation,
// so that a retry cannot add a second version.
func VersionKey(key, opID string) string {
	sum := sha256.Sum256([]byte(opID))
	return key + ".versions/" + hex.EncodeToString(sum[:16])
}
