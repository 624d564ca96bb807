package controllers_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencedlease/fencedlease/test/harness"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fencedlease/fencedlease/test/controllers/writelog"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// buildExample builds examples/fenced-controller once per test binary.
// $CONTROLLERS_TEST_BUILDFLAGS adds go build flags: with -overlay, a
// broken variant of pkg/fencedcontroller can be built into it without
// touching the tree, to check that these tests catch it.
var buildExample = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "fenced-controller-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "widget-controller")
	args := append([]string{"build", "-o", out}, strings.Fields(os.Getenv("CONTROLLERS_TEST_BUILDFLAGS"))...)
	cmd := exec.Command("go", append(args, "github.com/fencedlease/fencedlease/examples/fenced-controller")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build examples/fenced-controller: %w\n%s", err, o)
	}
	return out, nil
})

// replica is one process of the example controller, acting as its pod.
type replica struct {
	name   string
	cmd    *exec.Cmd
	out    *harness.LineLog
	exited chan struct{}
}

// kubeconfig writes what the pod's process reads: the API server, its CA,
// and a token bound to the pod by the TokenRequest API (the kubelet
// projects the same into a real pod).
func (f *fixture) kubeconfig(pod *corev1.Pod) string {
	token, err := testenv.PodToken(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	dir := f.t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	f.g.Expect(os.WriteFile(tokenFile, []byte(token), 0o600)).To(Succeed())
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "pod", Namespace: pod.Namespace}
	cfg.CurrentContext = "pod"
	path := filepath.Join(dir, "kubeconfig")
	f.g.Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return path
}

// startReplica starts the example controller for the pod with args, in a
// process group of its own. Its output is logged when the test fails, or
// always with $CONTROLLERS_TEST_LOG set.
func (f *fixture) startReplica(pod *corev1.Pod, args ...string) *replica {
	bin, err := buildExample()
	f.g.Expect(err).NotTo(HaveOccurred())
	r := &replica{name: pod.Name, out: &harness.LineLog{}, exited: make(chan struct{})}
	r.cmd = exec.Command(bin, append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	r.cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBERNETES_SERVICE_") || strings.HasPrefix(kv, "POD_") || strings.HasPrefix(kv, "KUBECONFIG=")
	}), "KUBECONFIG="+f.kubeconfig(pod), "POD_NAME="+pod.Name, "POD_NAMESPACE="+pod.Namespace)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	f.g.Expect(r.cmd.Start()).To(Succeed())
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	f.t.Cleanup(func() {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
		if f.t.Failed() || os.Getenv("CONTROLLERS_TEST_LOG") != "" {
			f.t.Logf("replica %s:\n%s", r.name, r.out)
		}
	})
	return r
}

// freeze stops the replica with SIGSTOP, as a frozen container or a
// stalled machine; thaw continues it.
func (r *replica) freeze() error { return syscall.Kill(-r.cmd.Process.Pid, syscall.SIGSTOP) }
func (r *replica) thaw() error   { return syscall.Kill(-r.cmd.Process.Pid, syscall.SIGCONT) }

// waitExit waits for the process to exit and returns its exit code.
func (r *replica) waitExit(d time.Duration) (int, error) {
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode(), nil
	case <-time.After(d):
		return 0, fmt.Errorf("replica %s did not exit within %s", r.name, d)
	}
}

// writes parses the replica's writes from its log.
func (r *replica) writes() []writelog.Write {
	var out []writelog.Write
	for _, l := range r.out.Lines() {
		if w, ok := writelog.Parse(l.Text); ok {
			out = append(out, w)
		}
	}
	return out
}

// logged says whether a line of the replica's log contains s.
func (r *replica) logged(s string) bool {
	return r.out.Contains(s)
}
