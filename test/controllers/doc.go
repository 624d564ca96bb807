// Package controllers tests fenced controllers end to end: the example
// controller of examples/fenced-controller in two replicas, each a process
// of its own acting with its pod's bound service-account token, against a
// real API server that calls the operator's fencing webhook, and the
// manager of pkg/fencedcontroller in the test process.
package controllers
