package record_test

import (
	"testing"

	"github.com/fencedlease/fencedlease/internal/record"
)

// TestVersionOrder holds the one comparison of resourceVersions and its two
// readings: a version that cannot be ordered is never known to be newer,
// and always may be, unless it is the very version seen.
func TestVersionOrder(t *testing.T) {
	for _, c := range []struct {
		a, b              string
		cmp               int
		ordered           bool
		newer, maybeNewer bool
	}{
		{a: "10", b: "9", cmp: 1, ordered: true, newer: true, maybeNewer: true},
		{a: "9", b: "10", cmp: -1, ordered: true},
		{a: "42", b: "42", cmp: 0, ordered: true},
		// Longer than an int64: etcd revisions as KEP-5504 orders them.
		{a: "100000000000000000000", b: "99999999999999999999", cmp: 1, ordered: true, newer: true, maybeNewer: true},
		// Nothing seen yet: anything may be newer, nothing is known to be.
		{a: "7", b: "", maybeNewer: true},
		{a: "", b: "", maybeNewer: true},
		// Not etcd revisions: a leading zero, a sign, letters.
		{a: "010", b: "9", maybeNewer: true},
		{a: "9", b: "+10", maybeNewer: true},
		{a: "abc", b: "abd", maybeNewer: true},
		{a: "abc", b: "abc"},
	} {
		cmp, ok := record.CompareVersions(c.a, c.b)
		if ok != c.ordered || (ok && cmp != c.cmp) {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d, %v", c.a, c.b, cmp, ok, c.cmp, c.ordered)
		}
		if got := record.Newer(c.a, c.b); got != c.newer {
			t.Errorf("Newer(%q, %q) = %v; want %v", c.a, c.b, got, c.newer)
		}
		if got := record.MaybeNewer(c.a, c.b); got != c.maybeNewer {
			t.Errorf("MaybeNewer(%q, %q) = %v; want %v", c.a, c.b, got, c.maybeNewer)
		}
	}
}
