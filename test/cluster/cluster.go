package cluster

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The processes of the cluster, in the order they start; Down stops them in
// reverse.
const (
	etcd              = "etcd"
	apiServer         = "kube-apiserver"
	controllerManager = "kube-controller-manager"
	scheduler         = "kube-scheduler"
	kwok              = "kwok"
)

var components = []string{etcd, apiServer, controllerManager, scheduler, kwok}

// DefaultNodeMonitorGracePeriod is how long the node lifecycle controller
// waits for a node's heartbeat before it marks the node lost (Ready
// Unknown, and the unreachable taints). Kubernetes' default is 40s; the
// local cluster uses 20s so that a node failure shows quickly.
const DefaultNodeMonitorGracePeriod = 20 * time.Second

// nodeLeaseSeconds is the duration kwok sets on the node Leases it renews
// (it renews at a quarter of it, as the kubelet does).
const nodeLeaseSeconds = 20

// stages are kwok's node and pod stages (stages/*.yaml).
//
//go:embed stages/*.yaml
var stages embed.FS

// Config says where the cluster lives and which binaries it runs.
type Config struct {
	// Dir holds the cluster's state: certificates, etcd's data, logs, pid
	// files and the kubeconfig.
	Dir string
	// K8sBin is the directory of etcd, kube-apiserver,
	// kube-controller-manager and kube-scheduler (hack/tools.sh cluster).
	K8sBin string
	// Kwok is the kwok binary (hack/tools.sh kwok).
	Kwok string
	// Nodes are the names of the simulated nodes; four when empty.
	Nodes []string
	// NodeMonitorGracePeriod defaults to DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
	// Detached processes outlive the program that starts them (make
	// cluster); attached ones (tests) die with it.
	Detached bool
}

// Cluster is a running local cluster.
type Cluster struct {
	Config
	// Kubeconfig is the path of a cluster administrator's kubeconfig.
	Kubeconfig string
	// RestConfig is the administrator's client configuration.
	RestConfig *rest.Config
	detached   bool
}

// New returns the cluster of cfg, running or not.
func New(cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("cluster: no state directory")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []string{"kwok-node-1", "kwok-node-2", "kwok-node-3", "kwok-node-4"}
	}
	if cfg.NodeMonitorGracePeriod == 0 {
		cfg.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	return &Cluster{Config: cfg, Kubeconfig: filepath.Join(dir, "kubeconfig"), detached: cfg.Detached}, nil
}

// Running says whether every process of the cluster runs and the API server
// is ready; it loads the administrator's client configuration if so.
func (c *Cluster) Running(ctx context.Context) bool {
	for _, name := range components {
		if _, ok := c.pid(name); !ok {
			return false
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return false
	}
	if err := ready(ctx, cfg); err != nil {
		return false
	}
	c.RestConfig = cfg
	return true
}

// Up starts the cluster, unless it runs already (then it returns false).
// The first start in a directory creates the certificates; every start
// begins with an empty etcd.
func (c *Cluster) Up(ctx context.Context) (started bool, err error) {
	if c.Running(ctx) {
		return false, nil
	}
	// Whatever is left of an earlier cluster in this directory goes first.
	if err := c.Down(); err != nil {
		return false, err
	}
	if err := c.up(ctx); err != nil {
		// A cluster that did not start leaves no process behind.
		_ = c.Down()
		return false, err
	}
	return true, nil
}

func (c *Cluster) up(ctx context.Context) error {
	for _, bin := range []string{filepath.Join(c.K8sBin, etcd), filepath.Join(c.K8sBin, apiServer),
		filepath.Join(c.K8sBin, controllerManager), filepath.Join(c.K8sBin, scheduler), c.Kwok} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s is missing: run 'hack/tools.sh cluster' and 'hack/tools.sh kwok' (make cluster does)", bin)
		}
	}
	p, err := c.certificates()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(c.Dir, "etcd")); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	a := addresses{
		etcd:   fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		port:   ports[2],
		server: fmt.Sprintf("https://127.0.0.1:%d", ports[2]),
	}
	if err := c.start(c.etcdProcess(a)); err != nil {
		return err
	}
	if err := waitHTTP(ctx, a.etcd+"/health", 30*time.Second); err != nil {
		return c.failed(etcd, err)
	}
	if err := c.start(c.apiServerProcess(a, p)); err != nil {
		return err
	}
	if err := c.writeKubeconfigs(a.server, p); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, cfg, 60*time.Second); err != nil {
		return c.failed(apiServer, err)
	}
	c.RestConfig = cfg
	stagesFile, err := c.writeStages()
	if err != nil {
		return err
	}
	for _, proc := range []process{c.controllerManagerProcess(p), c.schedulerProcess(), c.kwokProcess(stagesFile)} {
		if err := c.start(proc); err != nil {
			return err
		}
	}
	return c.addNodes(ctx)
}

// certificates makes the CA and the certificates, and a client certificate
// for each component (all cluster administrators: a local, disposable
// cluster).
func (c *Cluster) certificates() (*pki, error) {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	for _, u := range []struct{ name, user string }{
		{"admin", "local-cluster-admin"},
		{controllerManager, "system:kube-controller-manager"},
		{scheduler, "system:kube-scheduler"},
		{kwok, "kwok"},
	} {
		if err := p.client(u.name, u.user, "system:masters"); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// failed adds the end of a process's log to err.
func (c *Cluster) failed(name string, err error) error {
	return fmt.Errorf("%s did not start: %w\n%s", name, err, c.Tail(name, 20))
}

// Tail returns the last lines of a process's log.
func (c *Cluster) Tail(name string, lines int) string {
	b, _ := os.ReadFile(c.logFile(name))
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// LogFile is the path of a process's log.
func (c *Cluster) LogFile(name string) string { return c.logFile(name) }

// Down stops every process of the cluster that runs, operators first, and
// removes etcd's data. It is harmless when nothing runs.
func (c *Cluster) Down() error {
	var errs []error
	for _, name := range c.operatorNames() {
		errs = append(errs, c.stop(name, 10*time.Second))
	}
	for i := len(components) - 1; i >= 0; i-- {
		errs = append(errs, c.stop(components[i], 10*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(c.Dir, "etcd"))
}

// Processes lists the cluster's running processes, name to pid.
func (c *Cluster) Processes() map[string]int {
	out := map[string]int{}
	for _, name := range append(append([]string(nil), components...), c.operatorNames()...) {
		if pid, ok := c.pid(name); ok {
			out[name] = pid
		}
	}
	return out
}

func (c *Cluster) componentKubeconfig(name string) string {
	return filepath.Join(c.Dir, "pki", name+".kubeconfig")
}

func (c *Cluster) writeKubeconfigs(server string, p *pki) error {
	write := func(path, user string) error {
		kc := clientcmdapi.NewConfig()
		kc.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.path("ca.crt")}
		kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(user + ".crt"), ClientKey: p.path(user + ".key")}
		kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
		kc.CurrentContext = "local"
		return clientcmd.WriteToFile(*kc, path)
	}
	if err := write(c.Kubeconfig, "admin"); err != nil {
		return err
	}
	for _, name := range []string{controllerManager, scheduler, kwok} {
		if err := write(c.componentKubeconfig(name), name); err != nil {
			return err
		}
	}
	return nil
}

// writeStages puts kwok's stages into one file of YAML documents.
func (c *Cluster) writeStages() (string, error) {
	entries, err := stages.ReadDir("stages")
	if err != nil {
		return "", err
	}
	var docs []string
	for _, e := range entries {
		b, err := stages.ReadFile("stages/" + e.Name())
		if err != nil {
			return "", err
		}
		docs = append(docs, string(b))
	}
	path := filepath.Join(c.Dir, "kwok-stages.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o600)
}

// addNodes creates the simulated nodes and waits until kwok has made them
// Ready and the controller manager runs (it creates every namespace's
// default ServiceAccount).
func (c *Cluster) addNodes(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	for _, name := range c.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", "type": "kwok"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
		}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", name, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		notReady := c.notReadyNodes(ctx, cs)
		_, saErr := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if len(notReady) == 0 && saErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			if len(notReady) > 0 {
				return fmt.Errorf("nodes %v are not Ready after a minute: is kwok running?\n%s", notReady, c.Tail(kwok, 20))
			}
			return fmt.Errorf("no default ServiceAccount after a minute: is kube-controller-manager running? %w\n%s", saErr, c.Tail(controllerManager, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) notReadyNodes(ctx context.Context, cs kubernetes.Interface) []string {
	var out []string
	for _, name := range c.Nodes {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !NodeReady(n) {
			out = append(out, name)
		}
	}
	return out
}

// NodeReady says whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ready(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

func waitReady(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready(ctx, cfg)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url) //nolint:gosec,noctx // a local health endpoint
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n ports that are free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
