// Package setup wires the operator's parts into a controller-runtime manager.
// cmd/manager and the integration tests use the same wiring, so the tests run
// the operator as it runs in a cluster.
package setup
