package shard_test

import (
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/internal/shard"
)

func TestStep(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	lease := 15 * time.Second
	a, b := shard.Target{Name: "a", UID: "ua"}, shard.Target{Name: "b", UID: "ub"}
	held := func(t shard.Target) shard.Record {
		return shard.Record{Exists: true, Holder: t.Name, HolderUID: t.UID, State: "held", Changed: now.Add(-time.Hour)}
	}
	pending := held(a)
	pending.State = "pending"
	revoked := held(a)
	revoked.State, revoked.Changed = "revoked", now.Add(-5*time.Second)
	oldRevoked := revoked
	oldRevoked.Changed = now.Add(-lease)
	released := revoked
	released.State = "released"
	sameNameNewPod := held(shard.Target{Name: "a", UID: "old"})
	for _, tc := range []struct {
		name      string
		r         shard.Record
		t         shard.Target
		immediate bool
		want      shard.Action
		until     time.Time
	}{
		{"no Lease yet", shard.Record{}, a, false, shard.Grant, time.Time{}},
		{"owned by its target", held(a), a, false, shard.None, time.Time{}},
		{"pending for its target", pending, a, false, shard.Commit, time.Time{}},
		{"held, moves under Safe: revoked first", held(a), b, false, shard.Revoke, time.Time{}},
		{"held, moves under Immediate: granted at once", held(a), b, true, shard.Grant, time.Time{}},
		{"a pod of the same name is another pod", sameNameNewPod, a, false, shard.Revoke, time.Time{}},
		{"pending for another: never committed, replaced", pending, b, false, shard.Grant, time.Time{}},
		{"revoked 5 s ago under Safe: waits", revoked, b, false, shard.Wait, revoked.Changed.Add(lease)},
		{"revoked a lease ago under Safe: granted", oldRevoked, b, false, shard.Grant, time.Time{}},
		{"revoked under Immediate: granted", revoked, b, true, shard.Grant, time.Time{}},
		{"released: nothing to wait for", released, b, false, shard.Grant, time.Time{}},
		{"no eligible pod, held: revoked", held(a), shard.Target{}, false, shard.Revoke, time.Time{}},
		{"no eligible pod, revoked: nothing", revoked, shard.Target{}, false, shard.None, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, until := shard.Step(tc.r, tc.t, tc.immediate, lease, now)
			if got != tc.want || !until.Equal(tc.until) {
				t.Fatalf("Step = %v until %v, want %v until %v", got, until, tc.want, tc.until)
			}
		})
	}
}
