// Package podinject is the mutating admission webhook that delivers the
// fencing token into candidate pods.
//
// The operator publishes the token as pod annotations (fencedlease.io/fence,
// fencedlease.io/role, fencedlease.io/lease). A workload reads them as files:
// on pod CREATE, for pods labelled fencedlease.io/inject: "true", the webhook
// adds a downward-API volume that projects the three annotations (and a
// FencedShardSet pod's fencedlease.io/shards, as the file shards) into
// /etc/fencedlease, mounts it read-only in every container and init
// container, and, when the FencedLease that selects the pod sets
// spec.readinessGate, adds the readiness gate fencedlease.io/holder so that
// only the holder becomes Ready.
//
// The pure parts (which FencedLeases select a pod, the mutation, the conflict
// rules and their messages) take no client and are tested table-driven; the
// Handler only gathers the FencedLeases and turns the outcome into an
// admission response.
package podinject
