// Package setup wires the operator's parts into a controller-runtime manager.
// NewManager is the one constructor: cmd/manager and the integration tests
// (test/testenv.StartManager) both call it, so the tests run the operator as
// it runs in a cluster.
package setup
