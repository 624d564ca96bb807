package setup

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// fullPod is a pod as a Deployment and a kubelet leave it, with everything
// the operator does not read filled in.
func fullPod(mutate func(*corev1.Pod)) *corev1.Pod {
	since := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "uid-1", ResourceVersion: "42",
			Labels:          map[string]string{"app": "db", fencingv1alpha1.LabelLease: "db"},
			Annotations:     map[string]string{fencingv1alpha1.AnnotationRole: "holder", fencingv1alpha1.AnnotationFence: "7", lastApplied: `{"big":"copy"}`},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "db-1"}}},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: "db",
			ReadinessGates:     []corev1.PodReadinessGate{{ConditionType: fencingv1alpha1.ConditionHolder}},
			InitContainers:     []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers: []corev1.Container{
				{Name: "app", Image: "registry.example/app:1", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
				{Name: "sidecar", Image: "registry.example/sidecar:1"},
			},
			Volumes:     []corev1.Volume{{Name: "data"}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.1", HostIP: "192.168.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: since},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since},
				{Type: fencingv1alpha1.ConditionHolder, Status: corev1.ConditionTrue, LastTransitionTime: since},
			},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Image: "busybox", ImageID: "sha256:1",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, Image: "registry.example/app:1", ImageID: "sha256:2", ContainerID: "containerd://a",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}},
				{Name: "sidecar", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}},
			},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func slim(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := slimPod(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

// TestSlimPodKeepsWhatIsRead: for pods in every state the operator tells
// apart, the slim copy yields the same candidate (eligibility, readiness,
// node, termination), the same metadata, readiness gates and conditions,
// and is smaller.
func TestSlimPodKeepsWhatIsRead(t *testing.T) {
	terminated := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
		}
	}
	lostNode := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}}}
	cases := map[string]func(*corev1.Pod){
		"running and ready": nil,
		"containers not ready": func(p *corev1.Pod) {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		},
		"being deleted":         func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now },
		"pending":               func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending },
		"terminated":            terminated,
		"failed, still running": func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
		"fewer statuses than containers": func(p *corev1.Pod) {
			terminated(p)
			p.Status.ContainerStatuses = p.Status.ContainerStatuses[:1]
		},
		"init container running": func(p *corev1.Pod) {
			terminated(p)
			p.Status.InitContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			full := fullPod(mutate)
			s := slim(t, full)
			for _, node := range []*corev1.Node{nil, lostNode} {
				for _, overlapping := range []bool{false, true} {
					if a, b := holder.NewCandidate(full, overlapping, node), holder.NewCandidate(s, overlapping, node); a != b {
						t.Errorf("candidate (node %v, overlapping %v): whole pod %+v, slim pod %+v", node != nil, overlapping, a, b)
					}
				}
			}
			if holder.Terminated(full) != holder.Terminated(s) {
				t.Errorf("Terminated: whole pod %v, slim pod %v", holder.Terminated(full), holder.Terminated(s))
			}
			wantAnn := map[string]string{}
			for k, v := range full.Annotations {
				if k != lastApplied {
					wantAnn[k] = v
				}
			}
			if !equality.Semantic.DeepEqual(s.Labels, full.Labels) || !equality.Semantic.DeepEqual(s.Annotations, wantAnn) ||
				s.Name != full.Name || s.Namespace != full.Namespace || s.UID != full.UID || s.ResourceVersion != full.ResourceVersion ||
				!equality.Semantic.DeepEqual(s.DeletionTimestamp, full.DeletionTimestamp) || !equality.Semantic.DeepEqual(s.OwnerReferences, full.OwnerReferences) {
				t.Errorf("metadata changed: %+v", s.ObjectMeta)
			}
			if s.Spec.NodeName != full.Spec.NodeName || !equality.Semantic.DeepEqual(s.Spec.ReadinessGates, full.Spec.ReadinessGates) ||
				!equality.Semantic.DeepEqual(s.Status.Conditions, full.Status.Conditions) {
				t.Errorf("spec or conditions changed: %+v %+v", s.Spec, s.Status.Conditions)
			}
			if s.ManagedFields != nil {
				t.Error("managed fields kept")
			}
			finished := full.Status.Phase == corev1.PodSucceeded || full.Status.Phase == corev1.PodFailed
			if kept := len(s.Spec.Containers) + len(s.Status.ContainerStatuses); !finished && kept > 0 {
				t.Errorf("phase %s: %d container structs kept, never read", full.Status.Phase, kept)
			}
			if size(t, s) >= size(t, full) {
				t.Errorf("slim pod is %d bytes, the whole pod %d", size(t, s), size(t, full))
			}
		})
	}
}

func size(t *testing.T, p *corev1.Pod) int {
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// TestWholePods: the comparison options cache pods whole and nothing else
// changes.
func TestWholePods(t *testing.T) {
	o := CacheOptions()
	w := WholePods(o)
	for obj, b := range w.ByObject {
		_, isPod := obj.(*corev1.Pod)
		if isPod && b.Transform != nil {
			t.Error("WholePods kept the pod transform")
		}
		if _, isNode := obj.(*corev1.Node); isNode && b.Transform == nil {
			t.Error("WholePods dropped the node transform")
		}
	}
	for obj, b := range o.ByObject {
		if _, isPod := obj.(*corev1.Pod); isPod && b.Transform == nil {
			t.Error("WholePods changed the options it was given")
		}
	}
	if len(w.ByObject) != len(o.ByObject) || w.DefaultTransform == nil {
		t.Error("WholePods changed more than pods")
	}
}
