//go:build tools

// Package tools pins etcd, the storage of the test control plane.
package tools

import _ "go.etcd.io/etcd/server/v3"
