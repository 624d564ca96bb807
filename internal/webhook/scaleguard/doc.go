// Package scaleguard keeps the scale webhook's view of which objects are
// protected, so that scale writes of unprotected objects never reach the
// webhook and stay possible with the operator down.
//
// Scale objects carry no labels, so the scale webhook cannot use an
// objectSelector. Instead its matchConditions ask the API server's authorizer
// whether a marker service account holds the verb "guard" on a pseudo-resource
// of the group scale-guard.fencedlease.io named after the object (see
// MatchExpression and Resource). The names live in the rules of one
// ClusterRole bound to that service account; an object is protected only if
// its name is guarded there. This package holds the pure parts (the encoding
// of the pseudo-resource, the merge of names into the rules, the plan of a
// resync), Guard.Ensure and the Keeper that the fencing webhook names objects
// with, and the Resync the leader runs.
//
// Checked on kube-apiserver v1.37.2: authorizer.serviceAccount is available in
// admission matchConditions; the core group is encoded as an empty segment
// ("replicationcontrollers..default") and RBAC accepts and matches that string;
// RBAC's escalation check lets a writer add rules only if it holds the guard
// verb itself; a matchCondition that errors, with no other condition false,
// refuses the request under failurePolicy Fail (Forbidden, naming the
// expression) and skips the webhook under Ignore; a false condition skips the
// webhook even when another errors.
package scaleguard
