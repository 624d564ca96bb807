// Package fencedshardset is the controller of FencedShardSets: it spreads
// a set's shards over its eligible candidate pods (internal/shard decides
// where each goes), grants each shard on a Lease of its own with the
// FencedLease's record (a pending write whose resourceVersion is the
// fence, then a commit), and tells each pod its shards in one annotation,
// only once their grants are committed. docs/shards.md is the design.
package fencedshardset
