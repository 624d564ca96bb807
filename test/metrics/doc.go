// Package metrics_test scrapes the operator's metrics endpoint, as
// Prometheus does, after the lock service and the fencing webhook have done
// their work on a real control plane: the endpoint serves HTTPS, refuses a
// scrape without a token or with an identity not bound to the metrics-reader
// ClusterRole, and serves the series that docs/operations.md lists with the
// values the scenario implies. It also writes the list of the operator's
// series names (testdata/metrics.txt) that the alert and dashboard checks of
// hack/rulecheck read.
package metrics_test
