package storage_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/s3server"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const timeout = 30 * time.Second

// namespace creates a namespace whose default service account may renew
// its Leases.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := testenv.Namespace(ctx, env.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fencedlease-workload"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// readyPod creates a pod that has been ready for readyFor.
func readyPod(t *testing.T, ns, name string, labels map[string]string, readyFor time.Duration) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod, err := testenv.CreatePod(ctx, env.Client, testenv.Pod{Namespace: ns, Name: name, Labels: labels, ServiceAccount: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.SetReady(ctx, env.Client, pod, time.Now().Add(-readyFor).Truncate(time.Second)); err != nil {
		t.Fatal(err)
	}
	return pod
}

// testGateway is a fence gateway in front of the S3 server, acting with
// its own service account.
type testGateway struct {
	*httptest.Server
	registry *prometheus.Registry
	gateway  *gateway.Server
}

// startGateway serves a gateway in front of the S3 server with the routes;
// rules nil means the real fence decisions.
func startGateway(t *testing.T, routes []gateway.Route, rules *gateway.Rules) *testGateway {
	t.Helper()
	return startGatewayTo(t, store.Endpoint, routes, rules)
}

// startGatewayTo is startGateway with the store reached at upstream (a
// proxy in front of it).
func startGatewayTo(t *testing.T, upstream string, routes []gateway.Route, rules *gateway.Rules) *testGateway {
	t.Helper()
	return startGatewayWith(t, upstream, routes, func(o *gateway.Options) {
		if rules != nil {
			o.Rules = *rules
		}
	})
}

// startGatewayWith is startGatewayTo with the options changed by mutate
// (nil for none).
func startGatewayWith(t *testing.T, upstream string, routes []gateway.Route, mutate func(*gateway.Options)) *testGateway {
	t.Helper()
	kube, err := kubernetes.NewForConfig(gatewayConfig)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := client.New(gatewayConfig, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	up, err := gateway.NewUpstream(upstream, s3server.Region, store.Credentials(), newHTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	stop := make(chan struct{})
	broadcaster.StartRecordingToSink(stop)
	t.Cleanup(func() { close(stop); broadcaster.Shutdown() })
	reg := prometheus.NewRegistry()
	metrics, err := gateway.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	o := gateway.Options{
		Config:   &gateway.Config{Routes: routes},
		Upstream: up,
		Reviewer: &gateway.TokenReviewer{Client: kube, TTL: 10 * time.Second, MaxAccepted: 1024, Metrics: metrics},
		Grants:   &gateway.GrantReader{Kube: kube, Client: reader, FencedLeaseTTL: 30 * time.Second, MaxFencedLeases: 64},
		Recorder: broadcaster.NewRecorder(setup.Scheme(), "fence-gateway"),
		Metrics:  metrics,
		Log:      logr.Discard(),
	}
	if mutate != nil {
		mutate(&o)
	}
	if err := o.Config.Validate(); err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(o)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return &testGateway{Server: srv, registry: reg, gateway: gw}
}

// credentials writes what the kubelet projects into a pod at
// /var/run/secrets/kubernetes.io/serviceaccount.
func credentials(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	token, err := testenv.PodToken(context.Background(), env.Config, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string][]byte{"token": []byte(token), "ca.crt": env.Config.CAData, "namespace": []byte(pod.Namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// proc is a running writer, acting as a pod.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
	mu     sync.Mutex
	exited chan struct{}
}

// startWriter starts testdata/writer as the pod, with env added.
func startWriter(t *testing.T, pod *corev1.Pod, extra ...string) *proc {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(u.Host, ":")
	p := &proc{t: t, name: pod.Name, lines: make(chan string, 1024), stderr: &strings.Builder{}, exited: make(chan struct{})}
	p.cmd = exec.Command(writerBin)
	p.cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "FENCE_") || strings.HasPrefix(kv, "KUBERNETES_SERVICE_")
	}), append([]string{"FENCE_SERVICEACCOUNT_DIR=" + credentials(t, pod), "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
		"POD=" + pod.Name, "POD_UID=" + string(pod.UID)}, extra...)...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("writer %s:\n%s", p.name, p.errText())
		}
	})
	return p
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.stderr.Len() < 1<<20 {
		w.p.stderr.Write(b)
	}
	return len(b), nil
}

func (p *proc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// line waits for the next line of output that starts with prefix.
func (p *proc) line(prefix string, within time.Duration) (string, error) {
	deadline := time.After(within)
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
		case <-p.exited:
			return "", fmt.Errorf("writer %s exited waiting for %q:\n%s", p.name, prefix, p.errText())
		case <-deadline:
			return "", fmt.Errorf("writer %s: no %q within %s", p.name, prefix, within)
		}
	}
}

// send writes a line to the writer's stdin.
func (p *proc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// pause stops the writer's process with SIGSTOP; resume continues it.
func (p *proc) pause() error  { return syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP) }
func (p *proc) resume() error { return syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT) }

// wait waits for the writer to exit by itself.
func (p *proc) wait(within time.Duration) error {
	select {
	case <-p.exited:
		if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Success() {
			return fmt.Errorf("writer %s: %s\n%s", p.name, p.cmd.ProcessState, p.errText())
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("writer %s did not finish within %s", p.name, within)
	}
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
