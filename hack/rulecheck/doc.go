// Package rulecheck checks the chart's monitoring extras with Prometheus's
// own parsers, in a module of its own so that the operator's go.mod stays
// free of Prometheus's dependencies. It renders the chart with helm
// ($FENCEDLEASE_HELM, or bin/tools/helm-<HELM_VERSION of hack/versions.env>),
// then checks:
//   - the PrometheusRule: rulefmt accepts its groups (rule syntax, every
//     expression, every annotation template), every alert links to a section
//     of docs/operations.md that exists;
//   - the dashboard ConfigMap: its JSON parses, has panels, and every target
//     expression parses (Grafana's variables replaced by example values);
//   - every series an expression uses is one the operator serves, as listed
//     by test/metrics (test/metrics/testdata/metrics.txt, written from a real
//     scrape);
//   - the lease alerts, evaluated with the query engine over synthetic
//     series, fire when they should and not before;
//   - docs/operations.md explains every one of those series and every Event
//     reason of the API.
//
// The dashplot command of this module draws the dashboard's panels from a
// recording of the metrics endpoint (docs/operations.md shows the picture).
package rulecheck
