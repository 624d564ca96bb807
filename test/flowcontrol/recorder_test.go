//go:build apf

package flowcontrol_test

import (
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/rest"
)

// request is one request of the operator and how the API server classified
// it.
type request struct {
	at   time.Time
	took time.Duration
	// kind is "<verb> <resource>[/<subresource>]", or "<method> <path>" for
	// a non-resource URL; path is the URL's path.
	kind, path string
	code       int
	// flowSchema and priorityLevel are the UIDs the API server answered in
	// the X-Kubernetes-PF-FlowSchema-UID and -PriorityLevel-UID headers;
	// empty when the request got no answer.
	flowSchema, priorityLevel string
}

// recorder records every request sent through the configs it wraps, from
// the last reset on.
type recorder struct {
	mu   sync.Mutex
	reqs []request
}

// wrap returns a copy of cfg whose requests the recorder sees. Client-side
// rate limiting is off, as ctrl.GetConfig leaves it for the operator: the
// API server's priority and fairness alone decides who waits.
func (r *recorder) wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recordingTransport{next: rt, r: r} })
	return c
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = nil
}

func (r *recorder) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

type recordingTransport struct {
	next http.RoundTripper
	r    *recorder
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	rec := request{at: start, took: time.Since(start), kind: requestKind(req), path: req.URL.Path}
	if err == nil {
		rec.code = resp.StatusCode
		rec.flowSchema = resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)
		rec.priorityLevel = resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)
	}
	t.r.mu.Lock()
	t.r.reqs = append(t.r.reqs, rec)
	t.r.mu.Unlock()
	return resp, err
}

// requestKind names a request by its verb and resource, as RBAC and APF
// see it: /api/v1/namespaces/ns/pods/p/status PATCH is "patch pods/status".
func requestKind(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return req.Method + " " + req.URL.Path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource, name, sub := parts[0], "", ""
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		sub = "/" + parts[2]
	}
	verb := ""
	switch req.Method {
	case http.MethodGet:
		switch {
		case name != "":
			verb = "get"
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if name == "" {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(req.Method)
	}
	return verb + " " + resource + sub
}

// byClassification counts requests by kind, for those classified as want
// and for the others.
func byClassification(reqs []request, wantFlowSchema, wantPriorityLevel string) (matched, other map[string]int) {
	matched, other = map[string]int{}, map[string]int{}
	for _, r := range reqs {
		if r.code == 0 {
			continue // no answer, no classification
		}
		if r.flowSchema == wantFlowSchema && r.priorityLevel == wantPriorityLevel {
			matched[r.kind]++
		} else {
			other[r.kind+" (flow schema "+r.flowSchema+")"]++
		}
	}
	return matched, other
}

// latencies are the durations of the answered requests that keep says to,
// sorted.
func latencies(reqs []request, keep func(request) bool) []time.Duration {
	var out []time.Duration
	for _, r := range reqs {
		if r.code != 0 && keep(r) {
			out = append(out, r.took)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ofKind keeps the requests of the kinds.
func ofKind(kinds ...string) func(request) bool {
	return func(r request) bool { return slices.Contains(kinds, r.kind) }
}

// tooMany counts the answers 429 Too Many Requests: APF's rejections, which
// client-go retries after the Retry-After it is given.
func tooMany(reqs []request) int {
	n := 0
	for _, r := range reqs {
		if r.code == http.StatusTooManyRequests {
			n++
		}
	}
	return n
}
