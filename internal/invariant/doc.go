// Package invariant holds the safety rules of docs/design.md ("The
// invariants") that more than one checker enforces: the deterministic simulation's (internal/sim), the
// holder checker of the envtest tests (test/testenv), the chaos run's
// (test/chaos) and the storage chaos's (test/storage). Each checker reads
// its own source (a simulated store, an API server's watches, a recorded
// history, a writer's log), turns what it reads into the small events
// below, and keeps the rules only it can check; the rules they share are
// written once, here.
//
// The rules, each a small type fed in order:
//
//   - Publications: what pods are published as holder of (role holder with a
//     fence). At most one pod of a FencedLease holds at once; the fence
//     published never goes down, one fence is published to one pod only, and
//     a pod that lost a fence never gets it back.
//   - Statuses: a FencedLease's status never moves back: fence and
//     transitions never decrease, and a grant the status recorded as ended
//     is never named again.
//   - Grants: the grants committed on a Lease. Each new grant has a higher
//     fence than every one before, and one fence is granted to one pod. A
//     write accepted with a fence below the newest grant known when it
//     began is stale (Stale), and a write's fence must have been granted to
//     the writer (GrantedTo).
//   - Order: per destination key, the accepted writes' fences never go
//     back: a write with a fence below the highest one accepted before it
//     must have been refused.
//
// The package is pure Go: no client, no Kubernetes API call, no clock. Times
// are whatever the feeder orders its events by (store revisions,
// nanoseconds), fences and pods are plain numbers and strings.
package invariant
