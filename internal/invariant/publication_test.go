package invariant

import (
	"slices"
	"testing"
)

// holder is pod name published as holder of FencedLease db with fence f;
// its UID is "uid-" and the name.
func holder(name string, f int64) Publication {
	return Publication{Pod: name, UID: "uid-" + name, Lease: "db", Fence: f}
}

// none is pod name published as nothing.
func none(name string) Publication { return Publication{Pod: name, UID: "uid-" + name} }

// details are the messages of the violations.
func details(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Detail)
	}
	return out
}

// rules are the rules of the violations.
func rules(vs []Violation) []Rule {
	var out []Rule
	for _, v := range vs {
		out = append(out, v.Rule)
	}
	return out
}

// expect fails the test unless got holds exactly the messages want.
func expect(t *testing.T, got []Violation, want ...string) {
	t.Helper()
	if d := details(got); !slices.Equal(d, want) {
		t.Fatalf("violations %q, want %q", d, want)
	}
}

// feed observes the events before, which break no rule, then last, which
// breaks exactly the rules of the messages want.
func feed[E any](t *testing.T, observe func(E) []Violation, before []E, last E, want ...string) {
	t.Helper()
	for _, e := range before {
		expect(t, observe(e))
	}
	expect(t, observe(last), want...)
}

func TestPublicationsClean(t *testing.T) {
	p := NewPublications()
	for _, pub := range []Publication{holder("a", 10), holder("a", 10), none("a"), holder("b", 20), holder("b", 30), none("b"), holder("a", 40)} {
		expect(t, p.Observe(pub))
	}
	p.Gone("uid-a")
	expect(t, p.Observe(holder("c", 50)))
	if h := p.Highest("db"); h != 50 {
		t.Fatalf("highest fence %d, want 50", h)
	}
}

func TestPublicationsViolations(t *testing.T) {
	tests := []struct {
		name   string
		before []Publication
		pub    Publication
		want   []string
	}{
		{name: "two holders at once", before: []Publication{holder("a", 10)}, pub: holder("b", 20),
			want: []string{"2 pods published as holder of FencedLease db at once: [a(fence 10) b(fence 20)]"}},
		{name: "fence went down", before: []Publication{holder("a", 20), none("a")}, pub: holder("b", 10),
			want: []string{"pod b got fence 10 of FencedLease db after fence 20 was published"}},
		{name: "fence went down while the other holds", before: []Publication{holder("a", 20)}, pub: holder("b", 10),
			want: []string{"pod b got fence 10 of FencedLease db after fence 20 was published",
				"2 pods published as holder of FencedLease db at once: [a(fence 20) b(fence 10)]"}},
		{name: "one fence to two pods", before: []Publication{holder("a", 20), none("a")}, pub: holder("b", 20),
			want: []string{"pod b got fence 20 of FencedLease db, which was published to pod a (UID uid-a) before"}},
		{name: "fence regained", before: []Publication{holder("a", 20), none("a")}, pub: holder("a", 20),
			want: []string{"pod a got fence 20 of FencedLease db again after losing it"}},
		{name: "malformed fence", pub: Publication{Pod: "a", UID: "uid-a", Lease: "db", Fence: -1, Raw: "007"},
			want: []string{`pod a got malformed fence "007" of FencedLease db`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			feed(t, NewPublications().Observe, tc.before, tc.pub, tc.want...)
		})
	}
}

// TestPublicationsGone: a pod gone holds nothing, and lost its fence.
func TestPublicationsGone(t *testing.T) {
	p := NewPublications()
	expect(t, p.Observe(holder("a", 20)))
	p.Gone("uid-a")
	expect(t, p.Observe(holder("a", 20)), "pod a got fence 20 of FencedLease db again after losing it")
	p.Gone("uid-a")
	expect(t, p.Observe(holder("b", 30)))
	expect(t, p.Observe(holder("a", 20)), "pod a got fence 20 of FencedLease db after fence 30 was published",
		"2 pods published as holder of FencedLease db at once: [a(fence 20) b(fence 30)]")
}

// TestPublicationsOtherFencedLease: pods of two FencedLeases hold at once,
// each with its own fences.
func TestPublicationsOtherFencedLease(t *testing.T) {
	p := NewPublications()
	expect(t, p.Observe(holder("a", 20)))
	other := holder("b", 10)
	other.Lease = "other"
	expect(t, p.Observe(other))
}

// TestPublicationsRules: each violation names its rule.
func TestPublicationsRules(t *testing.T) {
	p := NewPublications()
	p.Observe(holder("a", 20))
	got := rules(p.Observe(holder("b", 10)))
	if want := []Rule{FenceWentDown, TwoHolders}; !slices.Equal(got, want) {
		t.Fatalf("rules %q, want %q", got, want)
	}
}

// TestShardPublicationsNameTheShard: the shards' tracker keeps the same
// rules and names a shard as a shard.
func TestShardPublicationsNameTheShard(t *testing.T) {
	p := NewShardPublications()
	shard := func(pod string, fence int64) Publication {
		return Publication{Pod: pod, UID: "uid-" + pod + "/7", Lease: "work/7", Fence: fence}
	}
	expect(t, p.Observe(shard("a", 20)))
	expect(t, p.Observe(shard("b", 10)), "pod b got fence 10 of shard work/7 after fence 20 was published",
		"2 pods published as holder of shard work/7 at once: [a(fence 20) b(fence 10)]")
}
