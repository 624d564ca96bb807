//go:build chaos

package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencedlease/fencedlease/internal/invariant"
)

// ShardName is how the history names a shard of a FencedShardSet where it
// names a FencedLease ("<set>/<key>"): a FencedLease's name never holds a
// slash, so the two never meet.
func ShardName(set, key string) string { return set + "/" + key }

// IsShard says whether a name of the history (Attempt.Lease, Holding.Lease)
// is a shard's rather than a FencedLease's.
func IsShard(name string) bool { return strings.Contains(name, "/") }

// HoldShards records what a pod's annotation fencedlease.io/shards shows it
// owning now, as the pod watch delivered it: each shard of the set with its
// fence (none: the pod was deleted or owns nothing). Each shard it showed
// before, no longer or with another fence, ends now.
func (r *Recorder) HoldShards(pod string, uid types.UID, set string, shards map[string]int64, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := r.open[ViaPod]
	prefix := set + "/"
	for k, h := range byKey {
		if k.uid != uid || !strings.HasPrefix(k.lease, prefix) {
			continue
		}
		if f, ok := shards[strings.TrimPrefix(k.lease, prefix)]; !ok || f != k.fence {
			h.To = at
			r.h.Holdings = append(r.h.Holdings, *h)
			delete(byKey, k)
		}
	}
	for key, fence := range shards {
		k := holdKey{ShardName(set, key), uid, fence}
		if byKey[k] == nil {
			byKey[k] = &Holding{Lease: k.lease, Pod: pod, PodUID: uid, Fence: fence, From: at, To: Open, Via: ViaPod}
		}
	}
}

// checkShardGrants: the committed grants of each shard, as the watch of its
// Lease delivered them in the order the Lease took them (ViaStatus holdings
// of a shard), have growing fences, one fence to one pod
// (internal/invariant's Grants.Commit).
func checkShardGrants(h *History, r *Result) {
	grants := invariant.NewGrants()
	for _, hd := range h.Holdings { // sorted by From: the watch's order
		if hd.Via != ViaStatus || !IsShard(hd.Lease) {
			continue
		}
		for _, v := range grants.Commit(invariant.Grant{Lease: hd.Lease, Fence: hd.Fence, Holder: string(hd.PodUID), At: int64(hd.From)}) {
			r.violate("shard %s: %s (grant to %s with fence %d seen at %s)", hd.Lease, v.Detail, hd.Pod, hd.Fence, hd.From)
		}
	}
}

// ShardSummary counts the writes to the shards' objects and the shards'
// movements, apart from the FencedLeases' figures.
type ShardSummary struct {
	Attempts, Accepted, Unknown int
	Rejected                    map[string]int
	// BySource as Summary.BySource.
	BySource map[string]int
	// Grants is the number of distinct (shard, fence) published to pods;
	// Moves the times a shard was published to another pod than the one
	// before.
	Grants, Moves int
}

// StaleRejections counts rejections of stale and impostor shard writes for
// a fencing reason.
func (s *ShardSummary) StaleRejections() int {
	n := 0
	for k, v := range s.BySource {
		src, reason, ok := strings.Cut(k, "/")
		if ok && src != string(SourceFresh) && staleReasons[reason] {
			n += v
		}
	}
	return n
}

// summarizeShards counts the shard writes and moves of a history.
func summarizeShards(h *History) ShardSummary {
	s := ShardSummary{Rejected: map[string]int{}, BySource: map[string]int{}}
	for _, a := range h.Attempts {
		if a.Set == "" {
			continue
		}
		s.Attempts++
		s.BySource[string(a.Source)]++
		switch a.Outcome {
		case Accepted:
			s.Accepted++
			s.BySource[string(a.Source)+"/accepted"]++
		case Unknown:
			s.Unknown++
			s.BySource[string(a.Source)+"/unknown"]++
		case Rejected:
			s.Rejected[a.Reason]++
			s.BySource[string(a.Source)+"/"+a.Reason]++
		}
	}
	byShard := map[string][]Holding{}
	for _, hd := range h.Holdings {
		if hd.Via == ViaPod && IsShard(hd.Lease) {
			byShard[hd.Lease] = append(byShard[hd.Lease], hd)
		}
	}
	for _, hs := range byShard {
		sort.SliceStable(hs, func(i, j int) bool { return hs[i].From < hs[j].From })
		fences := map[int64]bool{}
		for i, hd := range hs {
			fences[hd.Fence] = true
			if i > 0 && hd.PodUID != hs[i-1].PodUID {
				s.Moves++
			}
		}
		s.Grants += len(fences)
	}
	return s
}

// String is the shard line of the report.
func (s ShardSummary) String() string {
	rejected := 0
	for _, v := range s.Rejected {
		rejected += v
	}
	return fmt.Sprintf("  shards: attempts=%d accepted=%d rejected=%d unknown=%d grants=%d moves=%d; rejected by reason: %s; by source: %s\n",
		s.Attempts, s.Accepted, rejected, s.Unknown, s.Grants, s.Moves, counts(s.Rejected), counts(s.BySource))
}
