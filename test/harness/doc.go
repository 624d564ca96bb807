// Package harness holds the small helpers that the tests of every package
// share and that need nothing but the standard library and the Prometheus
// client: skipping what needs a real server under go test -short, a
// buffer that concurrent writers may share, free local ports, and sums of
// metric series. It imports no operator code, so the library's tests
// (pkg/fence/...) can use it without linking the operator.
package harness
