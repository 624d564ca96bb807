//go:build tools

// Package tools pins kwok, which simulates the nodes and pods of the local
// cluster (make cluster, make demo, test/e2e).
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
