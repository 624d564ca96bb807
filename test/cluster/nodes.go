package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// failedHolder is the holder that FailNode writes into a node's Lease.
const failedHolder = "node-failure"

// FailNode stops the heartbeats of a simulated node, the kwok way: kwok
// renews a node's Lease only while it holds it (several kwok instances can
// share the nodes), so the Lease is given to another holder for an hour.
// Nothing renews it any more, and kwok stops playing the node and its pods.
// The node lifecycle controller marks the node lost (Ready Unknown, the
// unreachable taints) NodeMonitorGracePeriod after this call.
func (c *Cluster) FailNode(ctx context.Context, node string) error {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"spec":{"holderIdentity":%q,"leaseDurationSeconds":3600,"renewTime":%q}}`,
		failedHolder, metav1.NowMicro().Format(metav1.RFC3339Micro))
	if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("take the Lease of node %s from kwok: %w", node, err)
	}
	return nil
}

// RestoreNode gives a failed node's Lease back to kwok: kwok takes it,
// renews it and makes the node Ready again, as a kubelet that comes back.
func (c *Cluster) RestoreNode(ctx context.Context, node string) error {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	patch := `{"spec":{"holderIdentity":null,"leaseDurationSeconds":null,"renewTime":null}}`
	if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("give the Lease of node %s back to kwok: %w", node, err)
	}
	return nil
}

// RestoreNodes restores every node that FailNode failed, and waits until
// they are all Ready.
func (c *Cluster) RestoreNodes(ctx context.Context, timeout time.Duration) error {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	leases, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == failedHolder {
			if err := c.RestoreNode(ctx, l.Name); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		notReady := c.notReadyNodes(ctx, cs)
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes %v are not Ready after %s", notReady, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
