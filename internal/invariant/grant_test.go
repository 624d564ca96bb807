package invariant

import "testing"

// grant is fence f of Lease db granted to pod uid at at.
func grant(f int64, uid string, at int64) Grant {
	return Grant{Lease: "db", Fence: f, Holder: uid, At: at}
}

func TestGrantsClean(t *testing.T) {
	g := NewGrants()
	for _, gr := range []Grant{grant(10, "a", 1), grant(10, "a", 2), grant(20, "b", 3), grant(30, "a", 4)} {
		expect(t, g.Commit(gr))
	}
	if !g.GrantedTo("db", 20, "b") || g.GrantedTo("db", 20, "a") || g.GrantedTo("db", 15, "a") || g.GrantedTo("other", 10, "a") {
		t.Fatal("GrantedTo does not follow the grants")
	}
	if last, _ := g.Last("db", "a"); last.Fence != 30 {
		t.Fatalf("a's last grant %+v, want fence 30", last)
	}
	if newest, _ := g.Newest("db", 3); newest.Fence != 20 {
		t.Fatalf("newest at 3 %+v, want fence 20", newest)
	}
}

func TestGrantsViolations(t *testing.T) {
	g := NewGrants()
	expect(t, g.Commit(grant(20, "b", 1)))
	expect(t, g.Commit(grant(10, "a", 2)), "fence 10 of Lease db granted to pod UID a after fence 20 was granted to pod UID b")
	expect(t, g.Commit(grant(20, "c", 3)), "fence 20 of Lease db granted to pod UID c, but it was granted to pod UID b before")
	// A feeder that watches one Lease need not name it.
	one := NewGrants()
	one.Commit(Grant{Fence: 20, Holder: "b"})
	expect(t, one.Commit(Grant{Fence: 10, Holder: "a"}), "fence 10 granted to pod UID a after fence 20 was granted to pod UID b")
}

// TestGrantsStale: a write below a grant known when it began is stale; one
// that began before the grant was known is not.
func TestGrantsStale(t *testing.T) {
	g := NewGrants()
	g.Commit(grant(10, "a", 100))
	g.Commit(grant(20, "b", 200))
	if _, stale := g.Stale("db", 10, 199); stale {
		t.Fatal("a write begun before fence 20 was known is stale")
	}
	newest, stale := g.Stale("db", 10, 200)
	if !stale || newest.Fence != 20 || newest.Holder != "b" {
		t.Fatalf("a write with fence 10 begun when fence 20 was known: stale %v, newest %+v", stale, newest)
	}
	if _, stale := g.Stale("db", 20, 300); stale {
		t.Fatal("a write with the newest fence is stale")
	}
}

// TestGrantsSeen: grants seen unchecked keep their earliest time.
func TestGrantsSeen(t *testing.T) {
	g := NewGrants()
	g.Seen(grant(20, "b", 500))
	g.Seen(grant(10, "a", 50))
	g.Seen(grant(20, "b", 300))
	if _, stale := g.Stale("db", 10, 299); stale {
		t.Fatal("stale before fence 20 was seen")
	}
	if newest, stale := g.Stale("db", 10, 300); !stale || newest.At != 300 {
		t.Fatalf("stale %v at %+v, want the earliest sight, 300", stale, newest)
	}
}
