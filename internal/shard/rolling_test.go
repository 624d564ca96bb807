package shard

import (
	"fmt"
	"testing"
	"time"
)

// rollingUpdate replaces every one of pods pods holding n shards, one at a
// time, the way a Deployment's rolling update does: with surge, each new
// pod is ready before the old one goes; without, the old one goes first.
// step is the time between two replacements, settle the time after the
// last one. It returns how many times the most moved shard moved, the
// moves in all, and whether the set ends balanced.
func rollingUpdate(t *testing.T, n, pods int, surge bool, step, joinDelay time.Duration) (most, total int, balanced bool) {
	t.Helper()
	now := t0
	var live []Pod
	for i := range pods {
		live = append(live, Pod{Name: fmt.Sprintf("old-%d", i), Since: now.Add(-time.Hour + time.Duration(i)*time.Second)})
	}
	in := Input{Shards: keys(n), Now: now, JoinDelay: joinDelay, Pods: live}
	owners := Assign(in).Owners
	moved := map[string]int{}
	acquired := map[string]time.Time{}
	history := map[string][]string{}
	plan := func() {
		transitions := map[string]int32{}
		for s, c := range moved {
			transitions[s] = int32(c)
		}
		p := Assign(Input{Shards: in.Shards, Owners: owners, Transitions: transitions, Acquired: acquired, Pods: live, Now: now, JoinDelay: joinDelay})
		for _, m := range p.Moves {
			history[m.Shard] = append(history[m.Shard], fmt.Sprintf("%s→%s at %s", m.From, m.To, now.Sub(t0)))
			moved[m.Shard]++
			acquired[m.Shard] = now
			total++
		}
		owners = p.Owners
	}
	for i := range pods {
		newPod := Pod{Name: fmt.Sprintf("new-%d", i), Since: now}
		if surge {
			live = append(live, newPod)
			plan()
			now = now.Add(step / 3)
			live = live[1:]
			plan()
		} else {
			live = live[1:]
			plan()
			now = now.Add(step / 3)
			newPod.Since = now
			live = append(live, newPod)
			plan()
		}
		now = now.Add(step / 3)
		plan()
		now = now.Add(step / 3)
	}
	now = now.Add(joinDelay)
	plan()
	worst := ""
	for s, c := range moved {
		if c > most {
			most, worst = c, s
		}
	}
	if most > 3 {
		t.Logf("replacements %s apart, surge %v: the most moved shard, %s: %v", step, surge, worst, history[worst])
	}
	c := map[string]int{}
	for _, o := range owners {
		c[o]++
	}
	balanced = len(c) == pods
	for _, v := range c {
		balanced = balanced && (v == n/pods || v == (n+pods-1)/pods)
	}
	return most, total, balanced
}

// TestRollingUpdateMoves replaces every one of 10 pods, one at a time,
// with replacements from 3 s to 6.5 min apart (JoinDelay is 1 min), on 2,000
// shards, and at 10,000 shards for two paces. With surge (the new pod ready
// before the old one goes: a Deployment's default), each shard moves
// exactly once, to a pod of the new revision. Without surge, the shards of
// the first pod to go are spread over the others (nobody else has room),
// and one of those may move twice more, when the pod that took it goes and
// when the last replacement takes its share: at most three moves, about
// 1.2 to 2 a shard on average. The set always ends balanced.
func TestRollingUpdateMoves(t *testing.T) {
	for _, tc := range []struct {
		name           string
		surge          bool
		from, to       time.Duration
		shards         int
		wantMost, want int
	}{
		{name: "surge", surge: true, from: 3 * time.Second, to: 400 * time.Second, shards: 2000, wantMost: 1},
		{name: "no surge", from: 3 * time.Second, to: 400 * time.Second, shards: 2000, wantMost: 3},
		{name: "10,000 shards, surge", surge: true, from: 20 * time.Second, to: 20 * time.Second, shards: 10000, wantMost: 1},
		{name: "10,000 shards, no surge", from: 5 * time.Minute, to: 5 * time.Minute, shards: 10000, wantMost: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worst, total, runs := 0, 0, 0
			for step := tc.from; step <= tc.to; step += 13 * time.Second {
				most, moves, balanced := rollingUpdate(t, tc.shards, 10, tc.surge, step, time.Minute)
				if !balanced {
					t.Fatalf("replacements %s apart: the set did not end balanced", step)
				}
				worst, total, runs = max(worst, most), total+moves, runs+1
			}
			t.Logf("%d updates: the most moved shard moved %d times; %.2f moves a shard on average",
				runs, worst, float64(total)/float64(runs*tc.shards))
			if worst > tc.wantMost {
				t.Errorf("a shard moved %d times, want at most %d", worst, tc.wantMost)
			}
			if tc.surge && total != runs*tc.shards {
				t.Errorf("with surge, %d moves in %d updates of %d shards, want each shard moved once", total, runs, tc.shards)
			}
		})
	}
}
