package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// machineState is what a real node must leave as it found it: the mount
// table, the network interfaces, the kernel settings the kubelet writes,
// and the paths the kubelet and containerd write by default.
type machineState struct {
	mounts     []string
	interfaces []string
	settings   map[string]string
	paths      map[string]bool
}

// defaultPaths are where the kubelet and containerd write when nothing
// keeps them away.
var defaultPaths = []string{"/run/containerd", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods",
	"/var/lib/containerd", "/opt/containerd", "/etc/cni/net.d", "/var/lib/cni", "/run/netns"}

func readMachine(t *testing.T) machineState {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	m := machineState{settings: map[string]string{}, paths: map[string]bool{}}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		m.mounts = append(m.mounts, f[1])
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		m.interfaces = append(m.interfaces, i.Name)
	}
	for _, k := range kernelSettings {
		v, _ := os.ReadFile("/proc/sys/" + k)
		m.settings[k] = string(v)
	}
	for _, p := range defaultPaths {
		_, err := os.Stat(p)
		m.paths[p] = err == nil
	}
	return m
}

// TestRealNodeRunsAPodAndLeavesNothing: a cluster with a real node beside
// kwok's runs a pod that asks for the real node as a real container — its
// user is the image's, it reads the pod's annotation from the downward-API
// file that the kubelet writes — while a pod that does not ask stays on a
// kwok node; the real node is played by its kubelet alone (kwok does not
// take its Lease). While it runs, the machine's kernel settings, mounts and
// default paths are untouched; after Down no process of the node or of its
// pods is left, nor its cgroups, mounts, interfaces or directories.
func TestRealNodeRunsAPodAndLeavesNothing(t *testing.T) {
	before := readMachine(t)
	c, down := realNodeCluster(t, "real-node-1")
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	g.Expect(err).NotTo(HaveOccurred())

	real := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "real", Namespace: "default", Annotations: map[string]string{"greeting": "from-the-api"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sh", Image: "fencedlease.local/workload:dev", ImagePullPolicy: corev1.PullNever,
				Command:      []string{"/bin/sh", "-c", `echo "uid=$(id -u)"; cat /podinfo/annotations; echo; sleep 3600`},
				VolumeMounts: []corev1.VolumeMount{{Name: "podinfo", MountPath: "/podinfo"}}}},
			Volumes: []corev1.Volume{{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}}}}}},
		}}
	OnRealNode(&real.Spec)
	// A pod on the pod network: it reaches the API server at the kubernetes
	// Service's address, and the machine reaches it at its own.
	networked := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "networked", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sh", Image: "fencedlease.local/workload:dev", ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", `nc -w 3 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" </dev/null && echo "reached $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; nc -ll -p 8080 -e /bin/sh`}}}}}
	OnRealNode(&networked.Spec)
	networked.Spec.HostNetwork = false
	simulated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "simulated", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nowhere.invalid/none"}}}}
	for _, p := range []*corev1.Pod{real, networked, simulated} {
		_, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	running := func(name string) func(Gomega) *corev1.Pod {
		return func(g Gomega) *corev1.Pod {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			return p
		}
	}
	var pod *corev1.Pod
	g.Eventually(func(g Gomega) { pod = running("real")(g) }).WithTimeout(60 * time.Second).Should(Succeed())
	g.Expect(pod.Spec.NodeName).To(Equal("real-node-1"))
	var sim *corev1.Pod
	g.Eventually(func(g Gomega) { sim = running("simulated")(g) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(sim.Spec.NodeName).To(Equal("kwok-node-1"))
	g.Eventually(func() (string, error) { return c.ContainerLog("real-node-1", pod, "sh") }).WithTimeout(30 * time.Second).
		Should(And(ContainSubstring("uid=65532\n"), ContainSubstring(`greeting="from-the-api"`)))
	g.Eventually(func(g Gomega) {
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "real-node-1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal("real-node-1")), "the real node's Lease is its kubelet's, not kwok's")
	}).WithTimeout(30 * time.Second).Should(Succeed())

	pn, err := c.podNet()
	g.Expect(err).NotTo(HaveOccurred())
	var onNet *corev1.Pod
	g.Eventually(func(g Gomega) { onNet = running("networked")(g) }).WithTimeout(60 * time.Second).Should(Succeed())
	subnet, _, _ := pn.nodeRange(1)
	g.Expect(onNet.Status.PodIP).To(HavePrefix(strings.TrimSuffix(subnet, "0.0/17")+"1."), "the pod's address is of the node's range")
	g.Eventually(func() (string, error) { return c.ContainerLog("real-node-1", onNet, "sh") }).WithTimeout(30*time.Second).
		Should(ContainSubstring("reached "+pn.serviceIP()+":443"), "the pod reaches the API server at the kubernetes Service's address")
	g.Eventually(func() (string, error) {
		return askShell(net.JoinHostPort(onNet.Status.PodIP, "8080"), "echo hello from $(hostname)")
	}).
		WithTimeout(20*time.Second).Should(Equal("hello from networked\n"), "the machine reaches the pod at its address")

	containers := cgroupProcesses(filepath.Join("/sys/fs/cgroup/pids", c.cgroupRoot("real-node-1")))
	g.Expect(containers).NotTo(BeEmpty(), "the pod's processes are in the node's cgroup")
	ns, err := os.ReadFile(filepath.Join(c.nodeDir("real-node-1"), "mntns"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(processesInNamespace(string(ns))).NotTo(BeEmpty())
	during := readMachine(t)
	g.Expect(during.interfaces).To(ContainElement(c.bridgeName()), "the pod network's bridge")
	br, err := net.InterfaceByName(c.bridgeName())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(br.HardwareAddr).To(Equal(pn.bridgeMAC()), "the bridge keeps its own address, not its lowest port's, as pods come and go")
	g.Expect(during.settings).To(Equal(before.settings), "the kubelet's kernel settings stay in the node's namespace")
	g.Expect(during.paths).To(Equal(before.paths), "the kubelet's and containerd's default paths stay in the node's namespace")
	g.Expect(during.mounts).To(Equal(before.mounts), "the node's mounts are in its own namespace")

	g.Expect(down()).To(Succeed())
	for _, pid := range containers {
		g.Expect(gone(pid)).To(BeTrue(), fmt.Sprintf("process %d of the pod is gone", pid))
	}
	g.Expect(processesInNamespace(string(ns))).To(BeEmpty())
	// Every hierarchy, the unified one of a hybrid layout too.
	left, err := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", c.cgroupRoot("real-node-1")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "the node's cgroups are removed")
	g.Expect(c.nodeDir("real-node-1")).NotTo(BeADirectory())
	g.Expect(c.Processes()).To(BeEmpty())
	after := readMachine(t)
	g.Expect(after.mounts).To(Equal(before.mounts))
	g.Expect(slices.Equal(after.interfaces, before.interfaces)).To(BeTrue(), "interfaces %v, before %v", after.interfaces, before.interfaces)
	g.Expect(after.settings).To(Equal(before.settings))
	g.Expect(after.paths).To(Equal(before.paths))
}

// askShell sends a command to a shell listening at addr and returns what it
// writes back.
func askShell(addr, command string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s; exit\n", command); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}
