package fencedshardset

import (
	"testing"
	"time"
)

// Each shard is timed on its own: a rolling update that leaves some shard
// unowned all along, each for a moment, never looks older than one move.
func TestUnownedSinceTimesEachShard(t *testing.T) {
	var u unownedSince
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at      time.Duration
		unowned []string
		want    time.Duration // since t0; -1 for none
	}{
		{0, []string{"a"}, 0},
		{10 * time.Second, []string{"b"}, 10 * time.Second}, // a owned again, b moves
		{20 * time.Second, []string{"c"}, 20 * time.Second},
		{30 * time.Second, []string{"c", "d"}, 20 * time.Second}, // c still unowned: its own time
		{40 * time.Second, nil, -1},
		{50 * time.Second, []string{"c"}, 50 * time.Second}, // unowned again: a new time
	}
	for _, s := range steps {
		got := u.observe("ns/work", s.unowned, at(s.at))
		switch {
		case s.want < 0 && !got.IsZero():
			t.Fatalf("at %s, every shard owned: oldest unowned since %s, want none", s.at, got.Sub(t0))
		case s.want >= 0 && !got.Equal(at(s.want)):
			t.Fatalf("at %s, unowned %v: oldest unowned since %s, want %s", s.at, s.unowned, got.Sub(t0), s.want)
		}
	}
	u.forget("ns/work")
	if len(u.since) != 0 {
		t.Fatalf("FencedShardSet ns/work forgotten, but %d sets are remembered", len(u.since))
	}
}
