//go:build tools

// Package tools pins etcd, the storage of the test control plane, and its
// command-line tools: etcdctl (snapshots, members, leader moves) and etcdutl
// (offline snapshot restore).
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
