package cluster

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fencedlease/fencedlease/test/harness"
)

// The processes of the cluster. An HA cluster numbers its etcd members
// (etcd-0 …) and API servers (kube-apiserver-0 …), and runs the balancer in
// front of its API servers as a process of its own when it is detached.
const (
	etcd              = "etcd"
	apiServer         = "kube-apiserver"
	controllerManager = "kube-controller-manager"
	scheduler         = "kube-scheduler"
	kwok              = "kwok"
	balancer          = "balancer"
)

// components are the cluster's processes in the order they start; Down
// stops them in reverse.
func (c *Cluster) components() []string {
	out := []string{etcd, apiServer}
	if c.HA {
		out = nil
		for i := range etcdMembers {
			out = append(out, memberName(i))
		}
		for i := range apiServers {
			out = append(out, serverName(i))
		}
		if c.detached {
			out = append(out, balancer)
		}
	}
	if !c.ControlPlaneOnly {
		out = append(out, controllerManager, scheduler, kwok)
		for _, node := range c.RealNodes {
			out = append(out, realNodeProcesses(node)...)
		}
	}
	return out
}

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
	// HA runs three etcd members (a real cluster, peer URLs on loopback)
	// and two API servers behind the balancer (ha.go). A directory whose
	// cluster was started HA stays HA until Down.
	HA bool
	// BalancerBin is the program that runs the balancer of a detached HA
	// cluster as a process (hack/cluster, whose "balance" command does);
	// an attached cluster balances in the test's process.
	BalancerBin string
	// RealNodes are the names of the real nodes: a containerd and a
	// kubelet of this machine each (realnode.go), beside kwok's. None when
	// empty.
	RealNodes []string
	// Kubelet is the kubelet binary of the real nodes (hack/tools.sh
	// kubelet).
	Kubelet string
	// Images are the image tarballs imported into every real node's
	// containerd; PauseImage must be among them.
	Images []string
	// ControlPlaneOnly starts etcd and the API servers alone: no
	// controller manager, scheduler, kwok or nodes, for tests that play
	// the kubelet themselves (test/testenv), as envtest does.
	ControlPlaneOnly bool
}

// Cluster is a running local cluster.
type Cluster struct {
	Config
	// Kubeconfig is the path of a cluster administrator's kubeconfig.
	Kubeconfig string
	// RestConfig is the administrator's client configuration. In an HA
	// cluster it reaches the API servers through the balancer.
	RestConfig *rest.Config
	detached   bool
	// ha is the running HA control plane of an attached cluster: its
	// members, servers and the proxies in front of them (ha.go).
	ha *haPlane
	// net is the pod network (podnet.go); serviceProxy forwards its
	// kubernetes Service's address to the API server in an attached
	// cluster (a detached one runs it as a process).
	net          podNetwork
	serviceProxy *Balancer
	// specs are the processes started, by name, to start them again.
	specsMu sync.Mutex
	specs   map[string]process
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
	if _, err := os.Stat(filepath.Join(dir, haMarker)); err == nil {
		cfg.HA = true
	}
	return &Cluster{Config: cfg, Kubeconfig: filepath.Join(dir, "kubeconfig"), detached: cfg.Detached}, nil
}

// Running says whether every process of the cluster runs and the API server
// is ready; it loads the administrator's client configuration if so.
func (c *Cluster) Running(ctx context.Context) bool {
	for _, name := range c.components() {
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
	if err := c.checkBinaries(); err != nil {
		return err
	}
	pn, err := c.choosePodNetwork()
	if err != nil {
		return err
	}
	c.net = pn
	p, err := c.certificates()
	if err != nil {
		return err
	}
	if err := c.removeData(); err != nil {
		return err
	}
	var s servers
	if c.HA {
		s, err = c.upHA(ctx, p)
	} else {
		s, err = c.upSingle(ctx, p)
	}
	if err != nil {
		return err
	}
	if err := c.writeKubeconfigs(s, p); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, cfg, 60*time.Second); err != nil {
		if c.HA {
			return c.failed(serverName(0), err)
		}
		return c.failed(apiServer, err)
	}
	c.RestConfig = cfg
	if c.HA && c.ha != nil {
		if err := c.waitServers(ctx, 60*time.Second); err != nil {
			return err
		}
	}
	if c.ControlPlaneOnly {
		return nil
	}
	stagesFile, err := c.writeStages()
	if err != nil {
		return err
	}
	for _, proc := range []process{c.controllerManagerProcess(p), c.schedulerProcess(), c.kwokProcess(stagesFile)} {
		if err := c.start(proc); err != nil {
			return err
		}
	}
	if err := c.addNodes(ctx); err != nil {
		return err
	}
	if err := c.startPodNetwork(s); err != nil {
		return err
	}
	return c.startRealNodes(ctx, p)
}

func (c *Cluster) checkBinaries() error {
	bins := []string{filepath.Join(c.K8sBin, etcd), filepath.Join(c.K8sBin, apiServer)}
	if c.HA {
		bins = append(bins, filepath.Join(c.K8sBin, etcdctl), filepath.Join(c.K8sBin, etcdutl))
		if c.detached {
			bins = append(bins, c.BalancerBin)
		}
	}
	if !c.ControlPlaneOnly {
		bins = append(bins, filepath.Join(c.K8sBin, controllerManager), filepath.Join(c.K8sBin, scheduler), c.Kwok)
		if len(c.RealNodes) > 0 {
			bins = append(bins, c.Kubelet)
			bins = append(bins, c.Images...)
			if c.detached {
				// The pod network's forwarding to the API server.
				bins = append(bins, c.BalancerBin)
			}
		}
	}
	for _, bin := range bins {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s is missing: run 'hack/tools.sh cluster' and 'hack/tools.sh kwok' (make cluster does)", bin)
		}
	}
	return nil
}

// removeData removes etcd's data, of one member or of several.
func (c *Cluster) removeData() error {
	dirs, err := filepath.Glob(filepath.Join(c.Dir, "etcd*"))
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}

// servers are the API server addresses that the kubeconfigs name: the
// administrator's, and each component's.
type servers struct {
	admin      string
	components map[string]string
}

// upSingle starts one etcd member and one API server.
func (c *Cluster) upSingle(ctx context.Context, p *pki) (servers, error) {
	ports, err := freePorts(3)
	if err != nil {
		return servers{}, err
	}
	a := addresses{
		etcd:   fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		port:   ports[2],
		server: fmt.Sprintf("https://127.0.0.1:%d", ports[2]),
	}
	if err := c.start(c.etcdProcess(a)); err != nil {
		return servers{}, err
	}
	if err := waitHTTP(ctx, a.etcd+"/health", 30*time.Second); err != nil {
		return servers{}, c.failed(etcd, err)
	}
	if err := c.start(c.apiServerProcess(apiServer, a.etcd, a.port, p)); err != nil {
		return servers{}, err
	}
	return servers{admin: a.server}, nil
}

// certificates makes the CA and the certificates, and a client certificate
// for each component (all cluster administrators: a local, disposable
// cluster).
func (c *Cluster) certificates() (*pki, error) {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := p.serving("apiserver", c.net.serviceIP()); err != nil {
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

// Down stops every process of the cluster that runs, operators and pod
// processes first, and removes etcd's data. It is harmless when nothing
// runs.
func (c *Cluster) Down() error {
	// The real nodes first, with their pods' processes.
	errs := []error{c.stopRealNodes()}
	for _, name := range c.programs() {
		errs = append(errs, c.stop(name, 10*time.Second))
	}
	if c.ha != nil {
		c.ha.close()
	}
	errs = append(errs, c.stopPodNetwork())
	// Every process of either layout, and whatever else has a pid file.
	names := controlPlaneNames()
	for _, n := range c.pidNames() {
		if !slices.Contains(names, n) {
			names = append([]string{n}, names...)
		}
	}
	for i := len(names) - 1; i >= 0; i-- {
		errs = append(errs, c.stop(names[i], 10*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(c.Dir, haMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return c.removeData()
}

// Processes lists the cluster's running processes, name to pid.
func (c *Cluster) Processes() map[string]int {
	out := map[string]int{}
	for _, name := range c.pidNames() {
		if pid, ok := c.pid(name); ok {
			out[name] = pid
		}
	}
	return out
}

func (c *Cluster) componentKubeconfig(name string) string {
	return filepath.Join(c.Dir, "pki", name+".kubeconfig")
}

func (c *Cluster) writeKubeconfigs(s servers, p *pki) error {
	write := func(path, user string) error {
		server := s.admin
		if cs, ok := s.components[user]; ok {
			server = cs
		}
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
func freePorts(n int) ([]int, error) { return harness.FreePorts(n) }
