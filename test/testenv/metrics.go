package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fencedlease/fencedlease/test/harness"
)

// FreeAddress is harness.FreeAddress: 127.0.0.1 with a free port.
func FreeAddress() (string, error) { return harness.FreeAddress() }

// MetricsReaderToken creates a service account in namespace, binds it to the
// metrics-reader ClusterRole as config/rbac/metrics_reader_role.yaml defines
// it, and returns a token of it: what Prometheus scrapes with.
func MetricsReaderToken(ctx context.Context, e *Env, namespace, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		return "", err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return "", fmt.Errorf("metrics_reader_role.yaml: %w", err)
	}
	role.Name = namespace + "-" + role.Name
	if err := apply(ctx, e.Client, role); err != nil {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if err := apply(ctx, e.Client, binding); err != nil {
		return "", err
	}
	return ServiceAccountToken(ctx, e, namespace, name)
}

// ServiceAccountToken creates a service account (if missing) and returns a
// token of it.
func ServiceAccountToken(ctx context.Context, e *Env, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := ensure(ctx, e.Client, sa); err != nil {
		return "", err
	}
	cfg, err := ServiceAccountConfig(ctx, e.Config, sa)
	if err != nil {
		return "", err
	}
	return cfg.BearerToken, nil
}

// Scrape reads the metrics endpoint at addr over HTTPS (its certificate is
// self-signed), with the bearer token if not empty. It returns the HTTP
// status and, for 200, the metric families.
func Scrape(ctx context.Context, addr, token string) (int, map[string]*dto.MetricFamily, error) {
	code, body, err := ScrapeText(ctx, addr, token)
	if err != nil || code != http.StatusOK {
		return code, nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return code, nil, fmt.Errorf("parse the scrape of %s: %w", addr, err)
	}
	return code, families, nil
}

// ScrapeText is Scrape without the parsing: the status and the body in the
// text exposition format.
func ScrapeText(ctx context.Context, addr, token string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test endpoint's certificate is self-signed
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read the scrape of %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, nil
	}
	return resp.StatusCode, body, nil
}

// Sample is harness.Sample: the value of the series of a scrape whose
// labels include every given label, summed, and false when none matches.
func Sample(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	return harness.Sample(families, name, labels)
}

// APIServerMetrics scrapes the API server's own /metrics with cfg (an
// identity allowed to get /metrics, such as the administrator's).
func APIServerMetrics(ctx context.Context, cfg *rest.Config) (map[string]*dto.MetricFamily, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape the API server: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse the API server's metrics: %w", err)
	}
	return fams, nil
}
