// Package holder holds the pure decision logic of the lock service: which
// pods are eligible, which one should hold the lease, whether a grant has
// expired on the operator's monotonic clock, what the next write to the Lease
// should be, and whether a new fence really is greater than every fence
// published before.
//
// Nothing here talks to the API server. The controller gathers the inputs,
// calls Decide, and carries out the Plan; that keeps every rule testable in
// microseconds and in one place.
package holder
