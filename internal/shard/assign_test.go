package shard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%03d", i)
	}
	return out
}

func pod(name string, age time.Duration) Pod { return Pod{Name: name, Since: t0.Add(-age)} }

// counts returns how many shards each pod owns in the plan.
func counts(p Plan) map[string]int {
	c := map[string]int{}
	for _, o := range p.Owners {
		c[o]++
	}
	return c
}

func TestAssign(t *testing.T) {
	six := keys(6)
	tests := []struct {
		name       string
		in         Input
		wantCounts map[string]int
		wantMoves  []Move
		wantTaken  int
		wantWait   time.Time
		wantPaced  bool
	}{{
		name:       "a cold start spreads the shards, the youngest pods first",
		in:         Input{Shards: keys(5), Pods: []Pod{pod("a", time.Hour), pod("b", time.Minute)}, Now: t0},
		wantCounts: map[string]int{"a": 2, "b": 3},
		wantMoves: []Move{{Shard: "s000", To: "b"}, {Shard: "s001", To: "b"}, {Shard: "s002", To: "b"},
			{Shard: "s003", To: "a"}, {Shard: "s004", To: "a"}},
	}, {
		name: "a balanced set stays as it is",
		in: Input{Shards: six, Pods: []Pod{pod("a", time.Hour), pod("b", time.Minute)}, Now: t0,
			Owners: map[string]string{"s000": "a", "s001": "b", "s002": "a", "s003": "b", "s004": "a", "s005": "b"}},
		wantCounts: map[string]int{"a": 3, "b": 3},
	}, {
		name:       "no eligible pod: every shard is released",
		in:         Input{Shards: keys(2), Owners: map[string]string{"s000": "a"}, Now: t0},
		wantCounts: map[string]int{"": 2},
		wantMoves:  []Move{{Shard: "s000", From: "a"}},
	}, {
		name: "a leaver's shards go to the youngest pod with room, and no other shard moves",
		in: Input{Shards: six, Pods: []Pod{pod("a", time.Hour), pod("c", time.Second)}, Now: t0, JoinDelay: time.Minute,
			Owners: map[string]string{"s000": "a", "s001": "b", "s002": "a", "s003": "b", "s004": "a", "s005": "b"}},
		wantCounts: map[string]int{"a": 3, "c": 3},
		wantMoves:  []Move{{Shard: "s001", From: "b", To: "c"}, {Shard: "s003", From: "b", To: "c"}, {Shard: "s005", From: "b", To: "c"}},
	}, {
		name: "a young pod is given no shard of a live owner before JoinDelay",
		in: Input{Shards: six, Pods: []Pod{pod("a", time.Hour), pod("b", time.Hour), pod("c", 10*time.Second)}, Now: t0, JoinDelay: time.Minute,
			Owners: map[string]string{"s000": "a", "s001": "b", "s002": "a", "s003": "b", "s004": "a", "s005": "b"}},
		wantCounts: map[string]int{"a": 3, "b": 3},
		wantWait:   t0.Add(50 * time.Second),
	}, {
		name: "once of age it takes its share, from the oldest owners, their last shards first",
		in: Input{Shards: six, Pods: []Pod{pod("a", time.Hour), pod("b", 2*time.Hour), pod("c", 2*time.Minute)}, Now: t0, JoinDelay: time.Minute,
			Owners: map[string]string{"s000": "a", "s001": "b", "s002": "a", "s003": "b", "s004": "a", "s005": "b"}},
		wantCounts: map[string]int{"a": 2, "b": 2, "c": 2},
		wantMoves:  []Move{{Shard: "s004", From: "a", To: "c"}, {Shard: "s005", From: "b", To: "c"}},
		wantTaken:  2,
	}, {
		name: "MaxMoves paces a rebalance",
		in: Input{Shards: six, Pods: []Pod{pod("a", time.Hour), pod("b", 2*time.Hour), pod("c", 2*time.Minute)}, Now: t0, JoinDelay: time.Minute, MaxMoves: 1,
			Owners: map[string]string{"s000": "a", "s001": "b", "s002": "a", "s003": "b", "s004": "a", "s005": "b"}},
		wantCounts: map[string]int{"a": 3, "b": 2, "c": 1},
		wantMoves:  []Move{{Shard: "s005", From: "b", To: "c"}},
		wantTaken:  1,
		wantPaced:  true,
	}, {
		name: "the extra shard stays with the pod that keeps the most",
		in: Input{Shards: keys(7), Pods: []Pod{pod("a", time.Hour), pod("b", time.Hour)}, Now: t0,
			Owners: map[string]string{"s000": "a", "s001": "a", "s002": "a", "s003": "a", "s004": "b", "s005": "b", "s006": "b"}},
		wantCounts: map[string]int{"a": 4, "b": 3},
	}, {
		name:       "a pod listed twice counts once",
		in:         Input{Shards: keys(2), Pods: []Pod{pod("a", time.Hour), pod("a", time.Hour)}, Now: t0},
		wantCounts: map[string]int{"a": 2},
		wantMoves:  []Move{{Shard: "s000", To: "a"}, {Shard: "s001", To: "a"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := Assign(tc.in)
			g.Expect(counts(p)).To(Equal(tc.wantCounts))
			g.Expect(p.Moves).To(Equal(tc.wantMoves))
			g.Expect(p.Taken).To(Equal(tc.wantTaken))
			g.Expect(p.Wait).To(Equal(tc.wantWait))
			g.Expect(p.Paced).To(Equal(tc.wantPaced))
		})
	}
}

// TestAssignRandom checks the properties on random sets: every shard has an
// eligible owner; with every pod of age and no cap each pod holds ⌊n/p⌋ or
// ⌈n/p⌉; a shard stays with a live owner unless taken; the shards taken are
// exactly the fewest any balanced assignment takes (computed here by trying
// every choice of the pods that get ⌈n/p⌉); the plan does not depend on the
// order of the pods; and planning again from the plan moves nothing.
func TestAssignRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		n, np := r.IntN(40), 1+r.IntN(7)
		all := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
		var pods []Pod
		for _, name := range all[:np] {
			pods = append(pods, pod(name, time.Duration(r.IntN(100))*time.Minute+2*time.Minute))
		}
		owners := map[string]string{}
		for _, s := range keys(n) {
			if k := r.IntN(len(all) + 1); k < len(all) {
				owners[s] = all[k]
			}
		}
		in := Input{Shards: keys(n), Owners: owners, Pods: pods, Now: t0, JoinDelay: time.Minute}
		p := Assign(in)
		c := counts(p)
		for _, s := range in.Shards {
			if !slices.ContainsFunc(pods, func(q Pod) bool { return q.Name == p.Owners[s] }) {
				t.Fatalf("case %d: shard %s owned by %q, not an eligible pod", i, s, p.Owners[s])
			}
		}
		for _, q := range pods {
			if c[q.Name] != n/np && c[q.Name] != (n+np-1)/np {
				t.Fatalf("case %d: pod %s holds %d of %d shards over %d pods", i, q.Name, c[q.Name], n, np)
			}
		}
		kept := map[string]int{}
		taken := 0
		for _, s := range in.Shards {
			o := owners[s]
			if slices.ContainsFunc(pods, func(q Pod) bool { return q.Name == o }) {
				kept[o]++
				if p.Owners[s] != o {
					taken++
				}
			}
		}
		if taken != p.Taken {
			t.Fatalf("case %d: %d shards left a live owner, the plan counts %d", i, taken, p.Taken)
		}
		if least := leastTaken(pods, kept, n); taken != least {
			t.Fatalf("case %d: %d shards taken from live owners, the fewest possible is %d", i, taken, least)
		}
		shuffled := slices.Clone(pods)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		in2 := in
		in2.Pods = shuffled
		if again := Assign(in2); !maps.Equal(again.Owners, p.Owners) {
			t.Fatalf("case %d: the plan depends on the order of the pods", i)
		}
		in3 := in
		in3.Owners = p.Owners
		if again := Assign(in3); len(again.Moves) != 0 {
			t.Fatalf("case %d: planning again from the plan moves %v", i, again.Moves)
		}
	}
}

// leastTaken is the fewest shards any balanced assignment takes from live
// owners: the least, over every choice of the n mod p pods that get
// ⌈n/p⌉, of Σ max(0, kept − quota).
func leastTaken(pods []Pod, kept map[string]int, n int) int {
	base, extra := n/len(pods), n%len(pods)
	best := -1
	for mask := 0; mask < 1<<len(pods); mask++ {
		if bits(mask) != extra {
			continue
		}
		sum := 0
		for i, q := range pods {
			quota := base
			if mask&(1<<i) != 0 {
				quota++
			}
			sum += max(0, kept[q.Name]-quota)
		}
		if best < 0 || sum < best {
			best = sum
		}
	}
	return best
}

func bits(m int) int {
	c := 0
	for ; m > 0; m &= m - 1 {
		c++
	}
	return c
}
