package fence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// In-cluster locations of the pod's service-account credentials.
const (
	// ServiceAccountDir is where the kubelet mounts the pod's service-account
	// token, CA and namespace; $FENCE_SERVICEACCOUNT_DIR overrides it (to run
	// a workload outside a pod against a real API server, as tests do).
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	podUIDExtra       = "authentication.kubernetes.io/pod-uid"
	podNameExtra      = "authentication.kubernetes.io/pod-name"
)

// APIConfig says how to reach the Kubernetes API server. The package talks
// to it with the standard library only, as the pod, with the pod's own bound
// service-account token.
type APIConfig struct {
	// Host is the API server's URL, https://host:port.
	Host string
	// Token returns the bearer token; it is called for every request, so
	// that a rotated projected token is picked up.
	Token func() (string, error)
	// CAData is the PEM bundle that the API server's certificate must chain
	// to.
	CAData []byte
	// Timeout bounds each request (a watch is bounded by its context);
	// 5 seconds when 0.
	Timeout time.Duration
}

// InClusterAPI is the API server as seen from inside a pod: the
// KUBERNETES_SERVICE_HOST and _PORT environment, and the token and CA of the
// pod's service account.
func InClusterAPI() (*APIConfig, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	dir := serviceAccountDir()
	ca, err := os.ReadFile(dir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("read the service account's CA: %w", err)
	}
	return &APIConfig{
		Host:   "https://" + net.JoinHostPort(host, port),
		CAData: ca,
		Token: func() (string, error) {
			b, err := os.ReadFile(dir + "/token")
			return strings.TrimSpace(string(b)), err
		},
	}, nil
}

// InClusterNamespace is the pod's namespace, from its service account.
func InClusterNamespace() (string, error) {
	b, err := os.ReadFile(serviceAccountDir() + "/namespace")
	if err != nil {
		return "", fmt.Errorf("read the pod's namespace: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func serviceAccountDir() string {
	if d := os.Getenv("FENCE_SERVICEACCOUNT_DIR"); d != "" {
		return d
	}
	return ServiceAccountDir
}

// apiClient makes the few API calls holder renewal needs.
type apiClient struct {
	cfg  APIConfig
	http *http.Client
}

func newAPIClient(cfg APIConfig) (*apiClient, error) {
	if cfg.Host == "" || cfg.Token == nil {
		return nil, errors.New("API config: Host and Token are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CAData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAData) {
			return nil, errors.New("API config: CAData holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext, IdleConnTimeout: 90 * time.Second}
	return &apiClient{cfg: cfg, http: &http.Client{Transport: tr}}, nil
}

// apiError is a failed API call with the status the API server returned.
type apiError struct {
	Code    int
	Reason  string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, e.Reason, e.Message)
}

func isConflict(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Code == http.StatusConflict
}

func isGone(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Code == http.StatusGone
}

// do sends one request and decodes a JSON answer into out (unless nil).
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
		}
	}
	return nil
}

func (c *apiClient) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.cfg.Host, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	token, err := c.cfg.Token()
	if err != nil {
		return nil, fmt.Errorf("read the service-account token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

func statusError(code int, data []byte) error {
	var st struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &st) != nil || st.Message == "" {
		st.Message = strings.TrimSpace(string(data))
	}
	return &apiError{Code: code, Reason: st.Reason, Message: st.Message}
}

// lease is the part of a coordination.k8s.io/v1 Lease that holder renewal
// reads. The whole object is kept as raw JSON too, so that an update writes
// back every field this package does not know.
type lease struct {
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		HolderIdentity       *string `json:"holderIdentity"`
		LeaseDurationSeconds *int32  `json:"leaseDurationSeconds"`
		RenewTime            *string `json:"renewTime"`
	} `json:"spec"`
	raw map[string]any
}

func leasePath(namespace, name string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/leases/" + url.PathEscape(name)
}

func (c *apiClient) getLease(ctx context.Context, namespace, name string) (*lease, error) {
	var raw map[string]any
	if err := c.do(ctx, http.MethodGet, leasePath(namespace, name), nil, &raw); err != nil {
		return nil, fmt.Errorf("get Lease %s/%s: %w", namespace, name, err)
	}
	return decodeLease(raw)
}

func decodeLease(raw map[string]any) (*lease, error) {
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	l := &lease{}
	if err := json.Unmarshal(data, l); err != nil {
		return nil, fmt.Errorf("decode a Lease: %w", err)
	}
	l.raw = raw
	return l, nil
}

// updateLease writes back the Lease with spec.renewTime and annotations
// changed as given, on the resourceVersion it was read with: a
// compare-and-swap.
func (c *apiClient) updateLease(ctx context.Context, l *lease, renewTime string, annotations map[string]string) (*lease, error) {
	raw, err := deepCopy(l.raw)
	if err != nil {
		return nil, err
	}
	if renewTime != "" {
		spec, _ := raw["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
			raw["spec"] = spec
		}
		spec["renewTime"] = renewTime
	}
	if len(annotations) > 0 {
		md, _ := raw["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			md["annotations"] = ann
		}
		for k, v := range annotations {
			ann[k] = v
		}
	}
	var out map[string]any
	if err := c.do(ctx, http.MethodPut, leasePath(l.Metadata.Namespace, l.Metadata.Name), raw, &out); err != nil {
		return nil, fmt.Errorf("update Lease %s/%s: %w", l.Metadata.Namespace, l.Metadata.Name, err)
	}
	return decodeLease(out)
}

func deepCopy(m map[string]any) (map[string]any, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(data, &out)
}

// watchLease streams the versions of one Lease after resourceVersion rv,
// calling f for each (and for bookmarks, whose object holds only a
// resourceVersion), until ctx ends, the API server ends the watch after
// timeout, or the stream breaks (nil when the server closed it, an
// apiError 410 when rv is too old).
func (c *apiClient) watchLease(ctx context.Context, namespace, name, rv string, timeout time.Duration, f func(eventType string, l *lease)) error {
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("fieldSelector", "metadata.name="+name)
	q.Set("resourceVersion", rv)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(max(int(timeout/time.Second), 1)))
	path := "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/leases?" + q.Encode()
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return fmt.Errorf("watch Lease %s/%s: %w", namespace, name, statusError(resp.StatusCode, data))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("watch Lease %s/%s: decode an event: %w", namespace, name, err)
		}
		if ev.Type == "ERROR" {
			data, _ := json.Marshal(ev.Object)
			code, _ := ev.Object["code"].(float64)
			return fmt.Errorf("watch Lease %s/%s: %w", namespace, name, statusError(int(code), data))
		}
		l, err := decodeLease(ev.Object)
		if err != nil {
			return err
		}
		f(ev.Type, l)
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("watch Lease %s/%s: %w", namespace, name, err)
	}
	return nil
}

// whoAmI asks the API server who the token belongs to: the pod it is bound
// to, by name and UID (a SelfSubjectReview; every authenticated user may
// make one).
func (c *apiClient) whoAmI(ctx context.Context) (podName, podUID string, err error) {
	body := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
	var out struct {
		Status struct {
			UserInfo struct {
				Username string              `json:"username"`
				Extra    map[string][]string `json:"extra"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := c.do(ctx, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", body, &out); err != nil {
		return "", "", fmt.Errorf("ask the API server who this pod is: %w", err)
	}
	ui := out.Status.UserInfo
	if len(ui.Extra[podUIDExtra]) != 1 {
		return "", "", fmt.Errorf("user %q is not a pod: its token is not bound to a pod (holder renewal needs the pod's own projected service-account token)", ui.Username)
	}
	name := ""
	if len(ui.Extra[podNameExtra]) == 1 {
		name = ui.Extra[podNameExtra][0]
	}
	return name, ui.Extra[podUIDExtra][0], nil
}
