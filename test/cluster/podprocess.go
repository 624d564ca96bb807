package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// PodProcess is a local program that plays a pod's container: kwok runs
// the pod, with no container, and the program authenticates with a
// service-account token bound to the pod, as the kubelet would project it,
// so that the API server and the operator's webhooks see the pod as the
// caller. The cluster tracks it like its own processes: Down stops it.
type PodProcess struct {
	// Name is the process's name in the cluster's run and log directories.
	Name string
	// Pod is the pod it acts as.
	Pod *corev1.Pod
	c   *Cluster
}

// podTokenSeconds is how long a pod process's token is valid: longer than
// any demo runs.
const podTokenSeconds = 3600

// StartPodProcess runs bin with args as the pod: $KUBECONFIG names a
// kubeconfig with a token bound to the pod (pods/<name>/kubeconfig in the
// cluster's directory), and $POD_NAME and $POD_NAMESPACE are set as the
// downward API would set them. Its log starts empty.
func (c *Cluster) StartPodProcess(ctx context.Context, name string, pod *corev1.Pod, bin string, args ...string) (*PodProcess, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the program of pod process %s: %w", name, err)
	}
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(c.Dir, "pods", name, "kubeconfig")
	if err := c.podKubeconfig(ctx, cs, pod, kubeconfig, podTokenSeconds); err != nil {
		return nil, err
	}
	if err := c.stop(name, 10*time.Second); err != nil {
		return nil, err
	}
	if err := os.Remove(c.logFile(name)); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if err := c.start(process{name: name, bin: bin, args: args,
		env: []string{"KUBECONFIG=" + kubeconfig, "POD_NAME=" + pod.Name, "POD_NAMESPACE=" + pod.Namespace}}); err != nil {
		return nil, err
	}
	return &PodProcess{Name: name, Pod: pod, c: c}, nil
}

// podKubeconfig writes a kubeconfig for the cluster's API server with a
// token of the pod's service account that the TokenRequest API binds to
// the pod.
func (c *Cluster) podKubeconfig(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, path string, seconds int64) error {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(seconds),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: c.RestConfig.Host, CertificateAuthority: c.RestConfig.CAFile}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "pod", Namespace: pod.Namespace}
	kc.CurrentContext = "local"
	return clientcmd.WriteToFile(*kc, path)
}

// Pause stops the process with SIGSTOP, as a frozen container, a stalled
// machine or a long garbage-collection pause: it cannot act, and does not
// know.
func (p *PodProcess) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *PodProcess) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *PodProcess) signal(sig syscall.Signal) error {
	pid, ok := p.c.pid(p.Name)
	if !ok {
		return fmt.Errorf("%s is not running", p.Name)
	}
	// Its own session: the process group is the process and its children.
	if err := syscall.Kill(-pid, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", p.Name, pid, err)
	}
	return nil
}

// Pid is the process's pid while it runs.
func (p *PodProcess) Pid() (int, bool) { return p.c.pid(p.Name) }

// Running says whether the process runs (paused or not).
func (p *PodProcess) Running() bool {
	_, ok := p.c.pid(p.Name)
	return ok
}

// Stop ends the process with SIGTERM (SIGKILL after 10s); a paused one is
// continued first.
func (p *PodProcess) Stop() error { return p.c.stop(p.Name, 10*time.Second) }

// LogFile is the path of the process's output.
func (p *PodProcess) LogFile() string { return p.c.logFile(p.Name) }

// StopPodProcesses stops every pod process whose name begins with prefix:
// those an interrupted run left behind.
func (c *Cluster) StopPodProcesses(prefix string) error {
	var errs []error
	for _, name := range c.programs() {
		if strings.HasPrefix(name, prefix) {
			errs = append(errs, c.stop(name, 10*time.Second))
		}
	}
	return errors.Join(errs...)
}
