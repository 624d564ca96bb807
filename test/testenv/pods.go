package testenv

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespace creates a namespace with a default service account (no
// controller-manager runs to create it).
func Namespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}
	if err := c.Create(ctx, sa); err != nil {
		return "", fmt.Errorf("create service account default in %s: %w", ns.Name, err)
	}
	return ns.Name, nil
}

// Pod is the spec of a simulated pod.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	ServiceAccount  string
	Node            string
	// Mutate changes the pod before it is created.
	Mutate func(*corev1.Pod)
}

// CreatePod creates a pod that a kubelet on Node would run.
func CreatePod(ctx context.Context, c client.Client, p Pod) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels},
		Spec: corev1.PodSpec{
			NodeName:           p.Node,
			ServiceAccountName: p.ServiceAccount,
			Containers:         []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = "node-1"
	}
	if p.Mutate != nil {
		p.Mutate(pod)
	}
	if pod.Spec.NodeName != "" {
		if err := EnsureNode(ctx, c, pod.Spec.NodeName); err != nil {
			return nil, err
		}
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return pod, nil
}

// SetReady sets the pod's status as the kubelet does once its containers are
// ready: phase Running and ContainersReady=True since readySince. Ready
// follows ContainersReady unless the pod has readiness gates that are not
// True.
func SetReady(ctx context.Context, c client.Client, pod *corev1.Pod, readySince time.Time) error {
	return setStatus(ctx, c, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		t := metav1.NewTime(readySince)
		setCond(p, corev1.PodScheduled, corev1.ConditionTrue, t)
		setCond(p, corev1.PodInitialized, corev1.ConditionTrue, t)
		setCond(p, corev1.ContainersReady, corev1.ConditionTrue, t)
		setCond(p, corev1.PodReady, readyFromGates(p), t)
	})
}

// SetContainersNotReady marks the containers not ready, as after a failed
// readiness probe.
func SetContainersNotReady(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	return setStatus(ctx, c, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		setCond(p, corev1.ContainersReady, corev1.ConditionFalse, now)
		setCond(p, corev1.PodReady, corev1.ConditionFalse, now)
	})
}

// SetFailed marks the pod Failed, as when its containers exit for good.
func SetFailed(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	return setStatus(ctx, c, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodFailed
		setCond(p, corev1.ContainersReady, corev1.ConditionFalse, now)
		setCond(p, corev1.PodReady, corev1.ConditionFalse, now)
	})
}

// SyncReady recomputes the Ready condition from ContainersReady and the
// readiness gates, as the kubelet does when a gate's condition changes.
func SyncReady(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	return setStatus(ctx, c, pod, func(p *corev1.Pod) {
		setCond(p, corev1.PodReady, readyFromGates(p), metav1.Now())
	})
}

func setStatus(ctx context.Context, c client.Client, pod *corev1.Pod, mutate func(*corev1.Pod)) error {
	for i := 0; ; i++ {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		mutate(pod)
		err := c.Status().Update(ctx, pod)
		if err == nil || i > 10 {
			if err != nil {
				return fmt.Errorf("update status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			return nil
		}
	}
}

func readyFromGates(p *corev1.Pod) corev1.ConditionStatus {
	containers := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			containers = c.Status == corev1.ConditionTrue
		}
	}
	if !containers {
		return corev1.ConditionFalse
	}
	for _, g := range p.Spec.ReadinessGates {
		ok := false
		for _, c := range p.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			return corev1.ConditionFalse
		}
	}
	return corev1.ConditionTrue
}

func setCond(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus, at metav1.Time) {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			if p.Status.Conditions[i].Status != s {
				p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = s, at
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: at})
}

// EnsureNode creates a Ready node of that name unless it exists, as a
// kubelet registering would. Nodes are cluster-wide: tests share them.
func EnsureNode(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, node); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("create node %s: %w", name, err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("set node %s Ready: %w", name, err)
	}
	return nil
}

// SetNodeLost marks a node as the node lifecycle controller does when its
// kubelet stops reporting: Ready Unknown and the unreachable taint. The pods
// on it keep the ContainersReady their kubelet last reported. A node that
// carries the taint already (a call before whose reply was lost, say)
// keeps it as it is: taints are unique by key and effect. A write that
// conflicts is made again on the node as it is then (SetNodeReady).
func SetNodeLost(ctx context.Context, c client.Client, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return setNodeLost(ctx, c, name) })
}

func setNodeLost(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute
	}) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: ptrNow()})
		if err := c.Update(ctx, node); err != nil {
			return fmt.Errorf("taint node %s: %w", name, err)
		}
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			node.Status.Conditions[i].Status, node.Status.Conditions[i].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("set node %s Ready Unknown: %w", name, err)
	}
	return nil
}

func ptrNow() *metav1.Time {
	t := metav1.Now()
	return &t
}
