//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// apiWrites are the requests the API server counted
// (apiserver_request_total) of some verbs, by verb and resource ("PATCH
// pods", "PATCH fencedleases/status", "LIST pods"), whatever their answer.
type apiWrites map[string]float64

// writeVerbs are the verbs of apiserver_request_total that write; listVerbs
// the one that lists.
var (
	writeVerbs = map[string]bool{"CREATE": true, "POST": true, "UPDATE": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true}
	listVerbs  = map[string]bool{"LIST": true}
)

// readAPIRequests scrapes the API server's own metrics for the requests of
// verbs.
func readAPIRequests(ctx context.Context, cfg *rest.Config, verbs map[string]bool) (apiWrites, error) {
	fams, err := testenv.APIServerMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	out := apiWrites{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if !verbs[l["verb"]] {
			continue
		}
		res := l["resource"]
		if l["subresource"] != "" {
			res += "/" + l["subresource"]
		}
		out[l["verb"]+" "+res] += m.GetCounter().GetValue()
	}
	return out, nil
}

// perGrant is the writes from before to after, less the test's own
// (ownFencedLeases FencedLease creates), per first grant of n.
func perGrant(before, after apiWrites, ownFencedLeases, n int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		d := v - before[k]
		if k == "POST fencedleases" || k == "CREATE fencedleases" {
			d -= float64(ownFencedLeases)
		}
		if d > 0 {
			out[k] = d / float64(n)
		}
	}
	return out
}

// describe is per-grant writes as one line, the most first, with their sum.
func describe(w map[string]float64) string {
	keys := make([]string, 0, len(w))
	total := 0.0
	for k, v := range w {
		keys = append(keys, k)
		total += v
	}
	sort.Slice(keys, func(i, j int) bool { return w[keys[i]] > w[keys[j]] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, w[k]))
	}
	return fmt.Sprintf("%.2f in all: %s", total, strings.Join(parts, ", "))
}
