// Package sim is a deterministic simulation of the FencedLease controller.
//
// It runs the real reconciler of controllers/fencedlease, several replicas of
// it at once, against a simulated API server: every object keeps its history
// of resourceVersions, every write is a compare-and-swap where the real API
// server makes it one, and every replica reads through informer caches that
// lag behind by a distance the simulation chooses. One seeded PRNG makes
// every nondeterministic choice: which replica's next API call runs, which
// cache catches up and by how much, which reply is lost after its write was
// applied, which replica pauses or crashes, which pod or node changes, and how
// far the clock moves. A run is a pure function of its seed, so a failure is
// replayed exactly and a failing seed becomes a regression test.
//
// After every write the checker verifies the invariants of the lock:
// at most one pod is published as holder at any instant, published fences
// only grow and were committed before they were published, a FencedLease's
// status never moves back to an older grant, and with takeover Safe no grant
// is written while the previous one may still be valid.
package sim
