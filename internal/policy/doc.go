// Package policy names the ValidatingAdmissionPolicies of config/policy,
// models them in Go (model.go, for the simulator) and holds their tests
// against a real API server. It is no webhook: the API server evaluates the
// policies itself.
//
// The operator-owned state (the fencedlease.io/ annotations and the
// fencedlease.io/lease label of pods, the Leases that FencedLeases own, the
// status of FencedLeases) is protected by a policy that the API server
// evaluates itself: the rules need no state beyond the request, so no
// webhook is called and nothing depends on the operator being up. The
// fencing webhook (internal/webhook/protected) covers what needs state: the
// current grant of a FencedLease.
package policy
