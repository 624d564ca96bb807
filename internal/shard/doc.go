// Package shard holds the pure assignment of a shard set: which pod should
// own each shard, given the shards, their current owners and the eligible
// pods, so that the shards are spread evenly and as few as possible move.
//
// Nothing here talks to the API server, and nothing here grants: a shard
// that changes hands is granted by the same grant and commit protocol as a
// FencedLease (internal/holder), with a fence of its own. Assign only says
// where each shard should go; the controller carries the moves out. The
// algorithm and its movement bound are argued in docs/shards.md.
package shard
