// Command fence-gateway is an S3-compatible proxy that fences writes to any
// S3-compatible object store: it admits a PUT, copy or DELETE only from the
// current holder pod of the FencedLease that the bucket and key are routed
// to (or the current owner of the shard of a FencedShardSet that the key
// names), with its current fence, and keeps each object's last fence with a
// conditional write. Reads pass through. Its logic is package
// internal/gateway; this command has its flags and wiring only. See
// docs/storage.md.
package main
