package storage_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/test/storage"
)

func at(ms int64) int64 { return time.UnixMilli(1_000_000 + ms).UnixNano() }

// kindOf is the attempt a made of another kind: an alias (path) or a replay
// (code).
func kindOf(a storage.Attempt, kind, path, code string) storage.Attempt {
	a.Kind, a.Path, a.Code = kind, path, code
	return a
}

// TestCheck feeds the checker histories with and without violations: a
// checker that found nothing would pass every chaos run.
func TestCheck(t *testing.T) {
	grants := []storage.Grant{
		{Fence: 10, HolderUID: "a", Seen: time.UnixMilli(1_000_000), Ended: time.UnixMilli(1_000_100)},
		{Fence: 20, HolderUID: "b", Seen: time.UnixMilli(1_000_100)},
	}
	w := func(op, uid, way, key string, f, call, ret int64, result string) storage.Attempt {
		return storage.Attempt{Op: op, Pod: uid, UID: uid, Way: way, Key: key, Fence: f, Call: at(call), Return: at(ret), Result: result}
	}
	tests := []struct {
		name    string
		history []storage.Attempt
		// grants, when set, replace the grants of fences 10 and 20.
		grants []storage.Grant
		want   []string
	}{
		{name: "clean", history: []storage.Attempt{
			w("a1", "a", "gateway", "k", 10, 0, 10, "accepted"),
			w("b1", "b", "gateway", "k", 20, 110, 120, "accepted"),
			w("a2", "a", "gateway", "k", 10, 130, 140, "rejected"),
			w("a3", "a", "pointer", "p", 10, 130, 140, "accepted"),
		}},
		{name: "concurrent writes may land in either order", history: []storage.Attempt{
			w("b1", "b", "gateway", "k", 20, 110, 130, "accepted"),
			w("a1", "a", "gateway", "k", 10, 50, 120, "accepted"),
		}},
		{name: "fence went back", history: []storage.Attempt{
			w("b1", "b", "pointer", "k", 20, 110, 120, "accepted"),
			w("a1", "a", "pointer", "k", 10, 130, 140, "accepted"),
		}, want: []string{"fence went back: pointer/k: a1 (pod a) accepted with fence 10 after b1 (pod b) was accepted with fence 20"}},
		{name: "unknown outcomes are not counted", history: []storage.Attempt{
			w("b1", "b", "gateway", "k", 20, 110, 120, "unknown"),
			w("a1", "a", "gateway", "k", 10, 30, 40, "accepted"),
		}},
		{name: "not the holder", history: []storage.Attempt{
			w("a1", "a", "gateway", "k", 20, 110, 120, "accepted"),
		}, want: []string{`accepted from a pod that did not hold that fence: a1 (pod a, UID a) wrote k with fence 20, granted to UID "b"`}},
		{name: "never granted", history: []storage.Attempt{
			w("a1", "a", "gateway", "k", 15, 110, 120, "accepted"),
		}, want: []string{`accepted from a pod that did not hold that fence: a1 (pod a, UID a) wrote k with fence 15, granted to UID ""`}},
		{name: "after the grant ended", history: []storage.Attempt{
			w("a1", "a", "gateway", "k", 10, 150, 160, "accepted"),
		}, want: []string{"accepted after its grant had ended: a1 (pod a) wrote k with fence 10 at " + time.Unix(0, at(150)).Format(time.RFC3339Nano) + ", 50ms after the grant ended"}},
		{name: "an alias accepted", history: []storage.Attempt{
			kindOf(w("a1", "a", "gateway", "k", 10, 0, 10, "accepted"), "alias", "./k", ""),
		}, want: []string{`accepted through a path alias: a1 (pod a) wrote "./k", an alias of k, with fence 10`}},
		{name: "a replay answered already applied writes nothing", history: []storage.Attempt{
			w("b1", "b", "pointer", "p", 20, 110, 120, "accepted"),
			kindOf(w("a1", "a", "pointer", "p", 10, 130, 140, "accepted"), "replay", "", "AlreadyApplied"),
		}},
		{name: "an operation applied twice", history: []storage.Attempt{
			w("a1", "a", "pointer", "p", 10, 0, 10, "accepted"),
			kindOf(w("a1", "a", "pointer", "p", 10, 30, 40, "accepted"), "replay", "", "Applied"),
		}, want: []string{"operation applied twice: a1 applied with fence 10 and again with fence 10 (replay)"}},
		{name: "the stale write below the highest returned, not the last", history: []storage.Attempt{
			w("b1", "b", "pointer", "k", 20, 110, 120, "accepted"),
			w("a1", "a", "pointer", "k", 10, 130, 140, "accepted"),
			w("a2", "a", "pointer", "k", 15, 150, 160, "accepted"),
		}, want: []string{
			"fence went back: pointer/k: a1 (pod a) accepted with fence 10 after b1 (pod b) was accepted with fence 20",
			"fence went back: pointer/k: a2 (pod a) accepted with fence 15 after b1 (pod b) was accepted with fence 20",
		}},
		{name: "grants out of order", grants: []storage.Grant{
			{Fence: 20, HolderUID: "b", Seen: time.UnixMilli(1_000_000)},
			{Fence: 10, HolderUID: "a", Seen: time.UnixMilli(1_000_100)},
		}, want: []string{"granted fence did not grow: fence 10 granted to pod UID a after fence 20 was granted to pod UID b"}},
		{name: "one fence granted to two pods", grants: []storage.Grant{
			{Fence: 10, HolderUID: "a", Seen: time.UnixMilli(1_000_000), Ended: time.UnixMilli(1_000_100)},
			{Fence: 10, HolderUID: "b", Seen: time.UnixMilli(1_000_100)},
		}, history: []storage.Attempt{
			w("b1", "b", "gateway", "k", 10, 110, 120, "accepted"),
		}, want: []string{
			"one fence granted to two pods: fence 10 granted to pod UID b, but it was granted to pod UID a before",
			`accepted from a pod that did not hold that fence: b1 (pod b, UID b) wrote k with fence 10, granted to UID "a"`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gs := grants
			if tc.grants != nil {
				gs = tc.grants
			}
			var got []string
			for _, v := range storage.Check(tc.history, gs) {
				got = append(got, v.String())
			}
			NewWithT(t).Expect(got).To(Equal(tc.want))
		})
	}
}
