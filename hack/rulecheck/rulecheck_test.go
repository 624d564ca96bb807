package rulecheck

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

var root = filepath.Join("..", "..")

// helmVersion is HELM_VERSION of hack/versions.env, where hack/tools.sh
// takes it from (this module does not import the operator's test harness).
func helmVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "hack", "versions.env"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION=(\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("hack/versions.env has no HELM_VERSION")
	}
	return string(m[1])
}

// render renders the chart with the monitoring extras on and returns its
// objects by kind.
func render(t *testing.T) map[string][]map[string]any {
	t.Helper()
	helm := os.Getenv("FENCEDLEASE_HELM")
	if helm == "" {
		helm = filepath.Join(root, "bin", "tools", "helm-"+helmVersion(t))
	}
	out, err := exec.Command(helm, "template", "fencedlease", filepath.Join(root, "charts", "fencedlease"),
		"--namespace", "fencedlease-system",
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template (set FENCEDLEASE_HELM, or run make helm): %v\n%s", err, out)
	}
	objs := map[string][]map[string]any{}
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(out), -1) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if kind, _ := o["kind"].(string); kind != "" {
			objs[kind] = append(objs[kind], o)
		}
	}
	return objs
}

func one(t *testing.T, objs map[string][]map[string]any, kind, name string) map[string]any {
	t.Helper()
	for _, o := range objs[kind] {
		if o["metadata"].(map[string]any)["name"] == name {
			return o
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
	return nil
}

// served reads the series names the operator serves; a histogram adds its
// _bucket, _sum and _count series.
func served(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "test", "metrics", "testdata", "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.HasPrefix(line, "#") {
			continue
		}
		out[f[0]] = true
		if f[1] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f[0]+s] = true
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("metrics.txt lists %d series: run go test ./test/metrics", len(out))
	}
	return out
}

var promql = parser.NewParser(parser.Options{})

// names returns the metric names an expression selects; every selector must
// name one.
func names(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return nil
	}
	var out []string
	for _, sel := range parser.ExtractSelectors(e) {
		name := ""
		for _, m := range sel {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: a selector without a metric name: %v", where, sel)
			continue
		}
		out = append(out, name)
	}
	return out
}

// anchors are the GitHub anchors of the headings of docs/operations.md.
func anchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
		out[strings.ReplaceAll(h, " ", "-")] = true
	}
	return out
}

func TestPrometheusRule(t *testing.T) {
	rule := one(t, render(t), "PrometheusRule", "fencedlease-alerts")
	spec, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("PrometheusRule: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	known, docs := served(t), anchors(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert", g.Name)
				continue
			}
			alerts = append(alerts, r.Alert)
			for _, n := range names(t, r.Alert, r.Expr) {
				if !known[n] {
					t.Errorf("alert %s uses %s, which the operator does not serve", r.Alert, n)
				}
			}
			url := r.Annotations["runbook_url"]
			_, anchor, ok := strings.Cut(url, "#")
			if !ok || !docs[anchor] {
				t.Errorf("alert %s: runbook_url %q names no section of docs/operations.md", r.Alert, url)
			}
			if anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook_url anchor %q is not the alert's own section", r.Alert, anchor)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: needs a severity label and a summary", r.Alert)
			}
		}
	}
	sort.Strings(alerts)
	want := []string{"FencedLeaseCertificateExpiresSoon", "FencedLeaseExpiredWhileRunning", "FencedLeaseFenceRegression", "FencedLeaseNoHolder",
		"FencedLeaseOperatorSaturated", "FencedLeaseRenewalFailures", "FencedLeaseRenewalLate", "FencedLeaseStaleWrites", "FencedLeaseWebhookErrors", "FencedLeaseWebhookSlow",
		"FencedShardSetUnowned"}
	if strings.Join(alerts, ",") != strings.Join(want, ",") {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// TestPrometheusRuleRejectsABrokenExpression: the check fails on what it
// must fail on.
func TestPrometheusRuleRejectsABrokenExpression(t *testing.T) {
	broken := []byte("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum by (name (fencedlease_holder)\n")
	if _, errs := rulefmt.Parse(broken, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler)); len(errs) == 0 {
		t.Error("rulefmt accepted an expression that does not parse")
	}
	if _, err := promql.ParseExpr("fencedlease_holder{namespace=~\"$namespace\"}[$__rate_interval]"); err == nil {
		t.Error("a Grafana variable parsed as PromQL: the dashboard check must replace them")
	}
}

// grafanaVariables are replaced before a dashboard expression is parsed, as
// Grafana does before it sends the query.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "30s", "$namespace", ".*", "$name", ".*")

func TestDashboard(t *testing.T) {
	cm := one(t, render(t), "ConfigMap", "fencedlease-dashboard")
	md := cm["metadata"].(map[string]any)
	if md["labels"].(map[string]any)["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap lacks the label grafana_dashboard: \"1\" that the Grafana sidecar loads")
	}
	data := cm["data"].(map[string]any)["fencedlease.json"].(string)
	file, err := os.ReadFile(filepath.Join(root, "charts", "fencedlease", "files", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(file), bytes.TrimSpace([]byte(data))) {
		t.Error("the ConfigMap does not carry files/monitoring/dashboard.json unchanged")
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(data), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) < 8 {
		t.Fatalf("dashboard: title %q, uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	known := served(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range names(t, "panel "+p.Title, grafanaVariables.Replace(tg.Expr)) {
				used[n] = true
				if !known[n] {
					t.Errorf("panel %q uses %s, which the operator does not serve", p.Title, n)
				}
			}
		}
	}
	for _, n := range []string{"fencedlease_holder", "fencedlease_fence", "fencedlease_handoffs_total", "fencedlease_acquisition_wait_seconds_bucket",
		"fencedlease_webhook_decisions_total", "fencedlease_certificate_expiry_timestamp_seconds", "fencedlease_shardset_shards_owned",
		"fencedlease_shardset_oldest_unowned_since_timestamp_seconds"} {
		if !used[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}

// TestOperationsDocCoversEverything: docs/operations.md explains every
// series the operator serves, every alert of the rule (a section each, as
// TestPrometheusRule checks) and every Event reason of the API.
func TestOperationsDocCoversEverything(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range served(t) {
		if strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") {
			continue
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/operations.md does not explain %s", name)
		}
	}
	api, err := os.ReadFile(filepath.Join(root, "api", "v1alpha1", "condition_types.go"))
	if err != nil {
		t.Fatal(err)
	}
	reasons := regexp.MustCompile(`(?m)^\s+Event\w+\s+=\s+"(\w+)"`).FindAllStringSubmatch(string(api), -1)
	if len(reasons) < 10 {
		t.Fatalf("found %d Event reasons in condition_types.go", len(reasons))
	}
	for _, r := range reasons {
		if !strings.Contains(string(doc), "| `"+r[1]+"` |") {
			t.Errorf("docs/operations.md has no row for the Event %s", r[1])
		}
	}
}
