package testenv

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetNodeReady undoes SetNodeLost, as when a lost kubelet reports again: the
// node lifecycle controller removes the unreachable and not-ready taints and
// the node's Ready condition turns True. A chaos run needs lost nodes to come
// back, or every candidate would end up on a lost node.
// A write that conflicts (the node changed since it was read: the node
// lifecycle controller of a real control plane writes nodes too) is made
// again on the node as it is then.
func SetNodeReady(ctx context.Context, c client.Client, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return setNodeReady(ctx, c, name) })
}

func setNodeReady(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady
	})
	if err := c.Update(ctx, node); err != nil {
		return fmt.Errorf("untaint node %s: %w", name, err)
	}
	now := metav1.Now()
	found := false
	for i := range node.Status.Conditions {
		if cond := &node.Status.Conditions[i]; cond.Type == corev1.NodeReady {
			found = true
			if cond.Status != corev1.ConditionTrue {
				cond.Status, cond.Reason, cond.LastTransitionTime = corev1.ConditionTrue, "KubeletReady", now
			}
			cond.LastHeartbeatTime = now
		}
	}
	if !found {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady,
			Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now})
	}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("set node %s Ready: %w", name, err)
	}
	return nil
}
