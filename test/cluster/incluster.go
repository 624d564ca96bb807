package cluster

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// OperatorImage is the operator's image as the real nodes have it imported
// (hack/tools/images): the chart's repository, tag dev.
const OperatorImage = "ghcr.io/fencedlease/fencedlease:dev"

// InClusterValues are the chart values that run the operator from
// OperatorImage on the real nodes, as pods of the pod network: the webhooks
// are called through their Service, with the certificate the operator
// provisions.
var InClusterValues = []string{
	"--set", "image.tag=dev", "--set", "image.pullPolicy=Never",
	"--set", "nodeSelector." + RealNodeLabel + "=real",
	"--set-json", fmt.Sprintf(`tolerations=[{"key":%q,"operator":"Exists"}]`, RealNodeTaint),
}

// InstallChartInCluster installs (or upgrades) the chart with
// InClusterValues and helmArgs, and waits until the operator's Deployment
// has every replica Ready on the real nodes. Webhook configurations of an
// earlier install that called a local operator by URL go first (helm
// would keep the URL beside the Service, which the API server refuses).
func (c *Cluster) InstallChartInCluster(ctx context.Context, helm, chart, release, namespace string, helmArgs ...string) (*Install, error) {
	if len(c.RealNodes) == 0 && !c.hasRealNodes(ctx) {
		return nil, errors.New("cluster: the operator runs in the cluster only on real nodes (make cluster starts them unless REAL_NODES=0)")
	}
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	callsURL := func(cc *admissionregistrationv1.WebhookClientConfig) bool { return cc != nil && cc.URL != nil }
	if err := deleteReleaseWebhooks(ctx, cs, release, callsURL); err != nil {
		return nil, err
	}
	args := append([]string{"--wait", "--timeout", "3m"}, InClusterValues...)
	if err := c.runHelm(ctx, helm, release, chart, namespace, append(args, helmArgs...)...); err != nil {
		return nil, err
	}
	dep, err := operatorDeployment(ctx, cs, release, namespace)
	if err != nil {
		return nil, err
	}
	return &Install{Release: release, Namespace: namespace, Deployment: dep}, nil
}

// hasRealNodes says whether the running cluster has a real node (one
// started by another program: make cluster).
func (c *Cluster) hasRealNodes(ctx context.Context) bool {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return false
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: RealNodeLabel + "=real"})
	return err == nil && len(nodes.Items) > 0
}

// RealNodeNames lists the running cluster's real nodes.
func (c *Cluster) RealNodeNames(ctx context.Context) ([]string, error) {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: RealNodeLabel + "=real"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	return out, nil
}

// StopKubelet stops (SIGSTOP) a real node's kubelet: its heartbeats end, as
// when the node hangs or is cut off, and the node lifecycle controller
// marks it lost NodeMonitorGracePeriod later. Its pods' containers run on,
// and their downward-API files are no longer updated. ContinueKubelet
// resumes it.
func (c *Cluster) StopKubelet(node string) error { return c.signalKubelet(node, syscall.SIGSTOP) }

// ContinueKubelet resumes a kubelet that StopKubelet stopped.
func (c *Cluster) ContinueKubelet(node string) error { return c.signalKubelet(node, syscall.SIGCONT) }

func (c *Cluster) signalKubelet(node string, sig syscall.Signal) error {
	name := realNodeProcesses(node)[2]
	pid, ok := c.pid(name)
	if !ok {
		return fmt.Errorf("cluster: %s does not run", name)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("cluster: signal %s: %w", name, err)
	}
	return nil
}
