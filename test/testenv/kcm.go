package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencedlease/fencedlease/test/harness"
)

// ControllerManager is a kube-controller-manager process running against the
// environment's API server (built next to the envtest binaries by
// 'hack/tools.sh cluster').
type ControllerManager struct {
	cmd    *exec.Cmd
	out    *harness.SyncBuffer
	exited chan error
}

// StartControllerManager runs kube-controller-manager as
// system:kube-controller-manager with the given extra flags (for example
// --controllers=node-lifecycle-controller).
func (e *Env) StartControllerManager(dir string, args ...string) (*ControllerManager, error) {
	bin := filepath.Join(binDir(), "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s is missing: run 'hack/tools.sh cluster' (make builds it) first", bin)
	}
	au, err := e.AddUser(envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add the controller manager's user: %w", err)
	}
	kubeconfig, err := au.KubeConfig()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kcm.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	base := []string{"--kubeconfig=" + path, "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false"}
	cm := &ControllerManager{cmd: exec.Command(bin, append(base, args...)...), out: &harness.SyncBuffer{}, exited: make(chan error, 1)}
	cm.cmd.Stdout, cm.cmd.Stderr = cm.out, cm.out
	if err := cm.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start kube-controller-manager: %w", err)
	}
	go func() { cm.exited <- cm.cmd.Wait() }()
	return cm, nil
}

// Stop kills the process and returns its output.
func (cm *ControllerManager) Stop() string {
	_ = cm.cmd.Process.Kill()
	if err := <-cm.exited; err != nil {
		return cm.out.String() + "\n(exited: " + err.Error() + ")"
	}
	return cm.out.String()
}

// Exited says whether the process has stopped on its own.
func (cm *ControllerManager) Exited() bool {
	select {
	case err := <-cm.exited:
		cm.exited <- err
		return true
	default:
		return false
	}
}

func binDir() string { return harness.ControlPlaneDir() }

// Kubelet plays the heartbeats of a node's kubelet: it renews the node's Lease
// in kube-node-lease and reports the node Ready, every interval, until ctx
// ends (the node is then lost to the node lifecycle controller).
func Kubelet(ctx context.Context, c client.Client, node string, interval time.Duration) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1.NamespaceNodeLease}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns.Name, err)
	}
	if err := EnsureNode(ctx, c, node); err != nil {
		return err
	}
	beat := func() error {
		now := metav1.NowMicro()
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, l)
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}
			if err := c.Create(ctx, l); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			l.Spec.RenewTime = &now
			if err := c.Update(ctx, l); err != nil {
				return err
			}
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		t := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: t, LastTransitionTime: readySince(n, t)}}
		return c.Status().Update(ctx, n)
	}
	if err := beat(); err != nil {
		return fmt.Errorf("first heartbeat of node %s: %w", node, err)
	}
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = beat() // a missed beat is what a real kubelet has too
			}
		}
	}()
	return nil
}

func readySince(n *corev1.Node, now metav1.Time) metav1.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime
		}
	}
	return now
}
