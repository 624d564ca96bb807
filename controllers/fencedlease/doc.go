// Package fencedlease is the controller of the FencedLease API.
//
// For each FencedLease it keeps a coordination.k8s.io/v1 Lease of the same
// name, owned by the FencedLease, as the single record of the grant. A grant
// is one compare-and-swap write of the Lease; the resourceVersion it produces
// is the fence. The grant is committed by a second compare-and-swap write that
// records the fence on the Lease, then mirrored into the FencedLease status,
// and only then published to the holder pod through annotations. A grant whose
// outcome is unknown is never published: it stays pending and is superseded by
// a fresh grant with a higher fence.
//
// The decisions (who is eligible, who holds, when a grant expires) are made by
// the pure package internal/holder; this package gathers inputs and writes.
package fencedlease
