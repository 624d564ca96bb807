package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A real node is a kubelet and a containerd of this machine, in a mount
// namespace of their own (docs/cluster.md):
//
//   - a holder process (unshare --mount … sleep) keeps the namespace; in it
//     /run, /var/lib and /var/log are the node's own directories, and the
//     kernel settings the kubelet writes (/proc/sys/vm/overcommit_memory …)
//     are files of the node's directory, so that nothing the kubelet or
//     containerd writes reaches the machine's;
//   - containerd and the kubelet enter it (nsenter), with their state, the
//     socket, the CNI configuration and the pods' logs under the node's
//     directory, the kubelet with a PATH without iptables;
//   - the images are imported from tarballs (no registry);
//   - the pods' cgroups are under a cgroup root of the node's own, in every
//     controller of the machine's cgroup v1 hierarchy.
//
// Real nodes carry the label RealNodeLabel and the taint RealNodeTaint: only
// the pods that ask for one run there (RealNodePod), the others stay on
// kwok's nodes. Their pods share the machine's network (hostNetwork).
const (
	// RealNodeLabel is the label (key=value "type=real") of the real nodes;
	// kwok's nodes carry type=kwok.
	RealNodeLabel = "type"
	// RealNodeTaint keeps the pods that do not tolerate it off the real
	// nodes.
	RealNodeTaint = "fencedlease.io/real-node"
	// PauseImage is the sandbox image of the real nodes' containerd; it is
	// among the imported images.
	PauseImage = "fencedlease.local/pause:dev"
)

// realNodeProcesses are the process names of a real node, in the order
// they start.
func realNodeProcesses(node string) []string {
	return []string{"mntns-" + node, "containerd-" + node, "kubelet-" + node}
}

// kernelSettings are the /proc/sys files the kubelet may write; in the
// node's namespace they are files of its directory.
var kernelSettings = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// hostDirs are the machine's directories that, in the node's namespace, are
// directories of the node's own: what the kubelet and containerd write there
// whatever their configuration (device-plugin sockets, /var/log/containers,
// the shims' sockets under /run/containerd) stays in the node's directory.
var hostDirs = []string{"/run", "/var/lib", "/var/log"}

func (c *Cluster) nodeDir(node string) string { return filepath.Join(c.Dir, "nodes", node) }

// cgroupRoot is the node's cgroup, unique to the cluster's directory so that
// two clusters on the machine do not share one.
func (c *Cluster) cgroupRoot(node string) string {
	sum := sha256.Sum256([]byte(c.Dir))
	return "/fencedlease-" + hex.EncodeToString(sum[:4]) + "-" + node
}

// startRealNodes starts every real node and waits until they are Ready.
func (c *Cluster) startRealNodes(ctx context.Context, p *pki) error {
	if len(c.RealNodes) == 0 {
		return nil
	}
	for _, node := range c.RealNodes {
		if err := c.startRealNode(ctx, p, node); err != nil {
			return fmt.Errorf("real node %s: %w", node, err)
		}
	}
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var notReady []string
		for _, node := range c.RealNodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil || !NodeReady(n) {
				notReady = append(notReady, node)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("real nodes %v are not Ready after 90s\n%s", notReady, c.Tail("kubelet-"+notReady[0], 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) startRealNode(ctx context.Context, p *pki, node string) error {
	dir := c.nodeDir(node)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, d := range []string{"host/run", "host/var-lib", "host/var-log", "sysctl", "cni", "kubelet", "pod-logs", "volume-plugins", "containerd", "path"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return err
	}
	names := realNodeProcesses(node)
	if err := c.start(process{name: names[0], bin: sleep, args: []string{"infinity"},
		wrap: []string{"unshare", "--mount", "--propagation", "private", "--"}}); err != nil {
		return err
	}
	holder, ok := c.waitExec(names[0])
	if !ok {
		return fmt.Errorf("the mount namespace's holder did not start\n%s", c.Tail(names[0], 5))
	}
	ns, err := waitOwnMountNamespace(holder)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "mntns"), []byte(ns), 0o600); err != nil {
		return err
	}
	enter := []string{"nsenter", "--mount=/proc/" + fmt.Sprint(holder) + "/ns/mnt", "--"}
	if err := c.privateMounts(enter, dir); err != nil {
		return err
	}
	if err := c.makeCgroups(node); err != nil {
		return err
	}
	path, err := pathWithoutIPTables(filepath.Join(dir, "path"))
	if err != nil {
		return err
	}
	// The socket is in the node's /run (a directory of the node's own):
	// a path under the cluster's directory may be too long for a socket.
	sock := "/run/containerd/containerd.sock"
	pn, err := c.podNet()
	if err != nil {
		return err
	}
	if err := writeContainerdConfig(dir, sock, pn.cniConfig(c.nodeIndex(node))); err != nil {
		return err
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	if err := c.start(process{name: names[1], bin: containerd, wrap: enter,
		args: []string{"--config", filepath.Join(dir, "containerd.toml")}, env: []string{"PATH=" + path}}); err != nil {
		return err
	}
	if _, ok := c.waitExec(names[1]); !ok {
		return c.failed(names[1], errors.New("it did not start"))
	}
	if err := c.waitFile(ctx, names[1], filepath.Join(dir, "host", "run", "containerd", "containerd.sock"), 30*time.Second); err != nil {
		return c.failed(names[1], err)
	}
	for _, img := range c.Images {
		if err := importImage(ctx, enter, sock, img); err != nil {
			return err
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kubeconfig, err := c.kubeletKubeconfig(p, node)
	if err != nil {
		return err
	}
	if err := c.writeKubeletConfig(p, node, sock, ports); err != nil {
		return err
	}
	return c.start(process{name: names[2], bin: c.Kubelet, wrap: enter, env: []string{"PATH=" + path},
		args: []string{
			"--config=" + filepath.Join(dir, "kubelet.yaml"),
			"--kubeconfig=" + kubeconfig,
			"--root-dir=" + filepath.Join(dir, "kubelet"),
			"--hostname-override=" + node,
			"--node-labels=" + RealNodeLabel + "=real",
			"--register-with-taints=" + RealNodeTaint + "=true:NoSchedule",
		}})
}

// waitExec waits until the named process, started through wrap, runs its
// binary, and returns its pid.
func (c *Cluster) waitExec(name string) (int, bool) {
	for range 250 {
		b, err := os.ReadFile(c.pidFile(name))
		if err != nil {
			return 0, false
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if pid, ok := c.pid(name); ok && len(lines) > 1 && runs(pid, lines[1]) {
			return pid, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, false
}

// waitOwnMountNamespace waits until pid is in a mount namespace other than
// this process's (unshare has made it) and returns its name.
func waitOwnMountNamespace(pid int) (string, error) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return "", err
	}
	for range 100 {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err == nil && ns != self {
			return ns, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("process %d did not get a mount namespace of its own", pid)
}

// privateMounts bind-mounts, in the node's namespace, the node's
// directories over the machine's /run, /var/lib and /var/log, and files
// holding the current values over the kernel settings the kubelet writes.
func (c *Cluster) privateMounts(enter []string, dir string) error {
	mount := func(src, dst string) error {
		args := append(slices.Clone(enter[1:]), "mount", "--bind", src, dst)
		if out, err := exec.Command(enter[0], args...).CombinedOutput(); err != nil {
			return fmt.Errorf("mount %s on %s in the node's namespace: %w: %s", src, dst, err, out)
		}
		return nil
	}
	for _, d := range hostDirs {
		if err := mount(filepath.Join(dir, "host", strings.ReplaceAll(strings.TrimPrefix(d, "/"), "/", "-")), d); err != nil {
			return err
		}
	}
	for _, k := range kernelSettings {
		cur, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			continue
		}
		f := filepath.Join(dir, "sysctl", strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, cur, 0o644); err != nil {
			return err
		}
		if err := mount(f, "/proc/sys/"+k); err != nil {
			return err
		}
	}
	return nil
}

// cgroupControllers are the machine's cgroup hierarchies: the v1
// controllers', and the unified (v2) one of a hybrid layout, where runc
// makes the containers' cgroups too.
func cgroupControllers() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", e.Name(), "cgroup.procs")); err == nil {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// makeCgroups creates the node's cgroup root in every controller: the
// kubelet requires it to exist.
func (c *Cluster) makeCgroups(node string) error {
	for _, ctl := range cgroupControllers() {
		if err := os.MkdirAll(filepath.Join(ctl, c.cgroupRoot(node)), 0o755); err != nil {
			return fmt.Errorf("cgroup of node %s: %w", node, err)
		}
	}
	return nil
}

// pathWithoutIPTables makes dir a directory of links to every program of
// the machine's PATH but iptables' (with it the kubelet would change the
// machine's firewall), and returns it as a PATH.
func pathWithoutIPTables(dir string) (string, error) {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			n := e.Name()
			if strings.HasPrefix(n, "iptables") || strings.HasPrefix(n, "ip6tables") || strings.HasPrefix(n, "ebtables") ||
				strings.HasPrefix(n, "nft") || strings.HasPrefix(n, "arptables") {
				continue
			}
			link := filepath.Join(dir, n)
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join(d, n), link); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

func writeContainerdConfig(dir, sock, cni string) error {
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = %[7]q
      SystemdCgroup = false
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), sock,
		filepath.Join(dir, "containerd", "opt"), PauseImage, filepath.Join(dir, "cni"), filepath.Join(dir, "containerd", "runc"))
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	// The pod network (podnet.go): host-network pods need none.
	return os.WriteFile(filepath.Join(dir, "cni", "10-fencedlease.conflist"), []byte(cni), 0o600)
}

func (c *Cluster) writeKubeletConfig(p *pki, node, sock string, ports []int) error {
	dir := c.nodeDir(node)
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
address: 127.0.0.1
port: %[2]d
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]s}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%[5]s
volumePluginDir: %[6]s
podLogsDir: %[7]s
failSwapOn: false
protectKernelDefaults: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
resolvConf: /etc/resolv.conf
nodeStatusUpdateFrequency: 4s
`, c.cgroupRoot(node), ports[0], ports[1], p.path("ca.crt"), sock,
		filepath.Join(dir, "volume-plugins"), filepath.Join(dir, "pod-logs"))
	return os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(cfg), 0o600)
}

// kubeletKubeconfig writes the kubelet's kubeconfig: a client certificate
// of the node's user (and of the cluster's administrators: a local,
// disposable cluster).
func (c *Cluster) kubeletKubeconfig(p *pki, node string) (string, error) {
	name := "kubelet-" + node
	if err := p.client(name, "system:node:"+node, "system:nodes", "system:masters"); err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: c.RestConfig.Host, CertificateAuthority: p.path("ca.crt")}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(name + ".crt"), ClientKey: p.path(name + ".key")}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	kc.CurrentContext = "local"
	path := filepath.Join(c.nodeDir(node), "kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// importImage imports the image tarball into the node's containerd, with
// ctr in the node's namespace (where containerd's socket is).
func importImage(ctx context.Context, enter []string, sock, tarball string) error {
	args := append(slices.Clone(enter[1:]), "ctr", "--address", sock, "-n", "k8s.io", "images", "import", tarball)
	cmd := exec.CommandContext(ctx, enter[0], args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import the image %s into containerd: %w: %s", tarball, err, out)
	}
	return nil
}

// waitFile waits until path exists, while the named process runs.
func (c *Cluster) waitFile(ctx context.Context, name, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if _, ok := c.pid(name); !ok {
			return fmt.Errorf("%s exited before it made %s", name, path)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not exist after %s", path, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopRealNodes stops every real node whose directory is in the cluster's
// (whatever Config says: the nodes of an earlier start are stopped too):
// the kubelet, then every process of the node's pods, containerd and its
// shims, then the namespace's holder; the namespace, and with it every
// mount of the node, goes with its last process. The node's cgroups and
// directory are removed.
func (c *Cluster) stopRealNodes() error {
	entries, _ := os.ReadDir(filepath.Join(c.Dir, "nodes"))
	var errs []error
	for _, e := range entries {
		errs = append(errs, c.stopRealNode(e.Name()))
	}
	return errors.Join(errs...)
}

func (c *Cluster) stopRealNode(node string) error {
	names := realNodeProcesses(node)
	var errs []error
	errs = append(errs, c.stop(names[2], 10*time.Second))
	ns, _ := os.ReadFile(filepath.Join(c.nodeDir(node), "mntns"))
	// The pods' processes: the shims' descendants, and whatever is left in
	// the node's cgroups.
	inNS := processesInNamespace(string(ns))
	killAll(descendants(inNS))
	for _, ctl := range cgroupControllers() {
		killAll(cgroupProcesses(filepath.Join(ctl, c.cgroupRoot(node))))
	}
	errs = append(errs, c.stop(names[1], 10*time.Second))
	killAll(processesInNamespace(string(ns)))
	errs = append(errs, c.stop(names[0], 5*time.Second))
	if err := waitNoProcessIn(string(ns), 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, ctl := range cgroupControllers() {
		if err := removeCgroup(filepath.Join(ctl, c.cgroupRoot(node))); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop real node %s: %w", node, err)
	}
	return os.RemoveAll(c.nodeDir(node))
}

// Images are the names of the image tarballs (hack/tools/images) that the
// real nodes import.
var Images = []string{"pause", "workload", "operator", "fenced-controller", "elector"}

// ImageTarballs are the tarballs of Images in dir.
func ImageTarballs(dir string) []string {
	var out []string
	for _, n := range Images {
		out = append(out, filepath.Join(dir, n+".tar"))
	}
	return out
}

// OnRealNode makes spec a pod of the real nodes: scheduled on one (its
// label), tolerating their taint, in the machine's network (the real nodes
// have no pod network: docs/cluster.md).
func OnRealNode(spec *corev1.PodSpec) {
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[RealNodeLabel] = "real"
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: RealNodeTaint, Operator: corev1.TolerationOpExists})
	spec.HostNetwork = true
}

// PodOnRealNode is OnRealNode for a pod that talks to the API server: its
// containers (init containers included) are also given the API server's
// address as a pod on a real node reaches it, in the two variables
// client-go's in-cluster configuration reads (KUBERNETES_SERVICE_HOST and
// _PORT), since no kube-proxy makes the kubernetes Service's address work
// there (docs/cluster.md). The address must be one the API server's
// certificate names.
func (c *Cluster) PodOnRealNode(spec *corev1.PodSpec) error {
	OnRealNode(spec)
	host, port, err := c.realNodeAPIServer()
	if err != nil {
		return err
	}
	env := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "KUBERNETES_SERVICE_PORT", Value: port}}
	for i := range spec.InitContainers {
		spec.InitContainers[i].Env = append(spec.InitContainers[i].Env, env...)
	}
	for i := range spec.Containers {
		spec.Containers[i].Env = append(spec.Containers[i].Env, env...)
	}
	return nil
}

// realNodeAPIServer is the API server's address as a pod on a real node
// reaches it: the administrator's, since the real nodes' pods share the
// machine's network.
func (c *Cluster) realNodeAPIServer() (host, port string, err error) {
	if c.RestConfig == nil {
		return "", "", errors.New("cluster: not running")
	}
	u, err := url.Parse(c.RestConfig.Host)
	if err != nil {
		return "", "", fmt.Errorf("cluster: the API server's address %q: %w", c.RestConfig.Host, err)
	}
	return u.Hostname(), u.Port(), nil
}

// ContainerLog returns what the container of a pod on a real node has
// written so far (its current instance's log, as the kubelet keeps it in
// the node's directory): the API server cannot reach the kubelets for
// kubectl logs.
func (c *Cluster) ContainerLog(node string, pod *corev1.Pod, container string) (string, error) {
	lines, err := c.ContainerLogLines(node, pod, container)
	var out strings.Builder
	for _, l := range lines {
		out.WriteString(l.Text)
		out.WriteString("\n")
	}
	return out.String(), err
}

// LogLine is one line a container wrote, with the time the container
// runtime read it (the CRI log's timestamp).
type LogLine struct {
	Time time.Time
	Text string
}

// ContainerLogLines is ContainerLog line by line, with the times.
func (c *Cluster) ContainerLogLines(node string, pod *corev1.Pod, container string) ([]LogLine, error) {
	dir := filepath.Join(c.nodeDir(node), "pod-logs", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("logs of container %s of pod %s/%s: %w", container, pod.Namespace, pod.Name, err)
	}
	if len(entries) == 0 {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, entries[len(entries)-1].Name()))
	if err != nil {
		return nil, err
	}
	// Each line: time, stream, tag (F full, P partial), then the text.
	var out []LogLine
	partial := ""
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			continue
		}
		partial += f[3]
		if f[2] != "F" {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, f[0])
		out = append(out, LogLine{Time: at, Text: partial})
		partial = ""
	}
	return out, nil
}
