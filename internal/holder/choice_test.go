package holder

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestChoose(t *testing.T) {
	same := time.Minute
	tests := []struct {
		name    string
		cands   []Candidate
		current types.UID
		avoid   []types.UID
		want    string
		ok      bool
	}{
		{name: "none", cands: nil, ok: false},
		{name: "all ineligible", cands: []Candidate{cand("a", same, IneligibleNotRunning)}, ok: false},
		{name: "ready longest wins", cands: []Candidate{cand("a", time.Second, ""), cand("b", time.Hour, "")}, want: "b", ok: true},
		{name: "tie broken by name", cands: []Candidate{cand("b", same, ""), cand("a", same, "")}, want: "a", ok: true},
		{name: "current kept while eligible", cands: []Candidate{cand("a", time.Second, ""), cand("b", time.Hour, "")},
			current: "uid-a", want: "a", ok: true},
		{name: "ineligible current not kept", cands: []Candidate{cand("a", time.Second, IneligibleDeleting), cand("b", time.Second, "")},
			current: "uid-a", want: "b", ok: true},
		{name: "avoided only as a last resort", cands: []Candidate{cand("a", time.Hour, ""), cand("b", time.Second, "")},
			avoid: []types.UID{"uid-a"}, want: "b", ok: true},
		{name: "avoided when alone", cands: []Candidate{cand("a", time.Hour, "")},
			avoid: []types.UID{"uid-a"}, want: "a", ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := Choose(tt.cands, tt.current, tt.avoid...)
			g.Expect(ok).To(Equal(tt.ok))
			g.Expect(got.Name).To(Equal(tt.want))
		})
	}
}

func TestNewCandidate(t *testing.T) {
	readyAt := metav1.NewTime(t0)
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"},
			Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: readyAt},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse},
			}}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		overlap bool
		node    *corev1.Node
		want    string
	}{
		{name: "running with containers ready is eligible even when Ready is False (readiness gate)", pod: pod(nil), want: ""},
		{name: "deleting", pod: pod(func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }), want: IneligibleDeleting},
		{name: "failed", pod: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), want: IneligibleNotRunning},
		{name: "pending", pod: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), want: IneligibleNotRunning},
		{name: "containers not ready", pod: pod(func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }), want: IneligibleContainers},
		{name: "no conditions", pod: pod(func(p *corev1.Pod) { p.Status.Conditions = nil }), want: IneligibleContainers},
		{name: "overlap", pod: pod(nil), overlap: true, want: IneligibleOverlap},
		{name: "node Ready Unknown (stopped reporting)", pod: pod(nil), node: node(corev1.ConditionUnknown),
			want: "node n1 is not Ready (Ready=Unknown)"},
		{name: "node Ready False", pod: pod(nil), node: node(corev1.ConditionFalse), want: "node n1 is not Ready (Ready=False)"},
		{name: "node unreachable taint while Ready still reads True", pod: pod(nil),
			node: taint(node(corev1.ConditionTrue), corev1.TaintNodeUnreachable), want: "node n1 has the taint node.kubernetes.io/unreachable:NoExecute"},
		{name: "node not-ready taint", pod: pod(nil),
			node: taint(node(corev1.ConditionTrue), corev1.TaintNodeNotReady), want: "node n1 has the taint node.kubernetes.io/not-ready:NoExecute"},
		{name: "the not-ready NoSchedule taint of a node that just registered does not count", pod: pod(nil),
			node: taintEffect(node(corev1.ConditionTrue), corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule), want: ""},
		{name: "other taints do not count", pod: pod(nil), node: taint(node(corev1.ConditionTrue), "example.com/dedicated"), want: ""},
		{name: "node gone", pod: pod(nil), node: nil, want: "node n1 does not exist"},
		{name: "a deleting pod on a lost node says it is deleting", node: node(corev1.ConditionUnknown),
			pod: pod(func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }), want: IneligibleDeleting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			n := tt.node
			if n == nil && tt.name != "node gone" {
				n = node(corev1.ConditionTrue)
			}
			c := NewCandidate(tt.pod, tt.overlap, n)
			g.Expect(c.Ineligible).To(Equal(tt.want))
			g.Expect(c.NodeName).To(Equal("n1"))
			if len(tt.pod.Status.Conditions) > 0 {
				g.Expect(c.ReadySince).To(BeTemporally("==", t0))
			}
		})
	}
}

func node(ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

func taint(n *corev1.Node, key string) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute})
	return n
}

func taintEffect(n *corev1.Node, key string, effect corev1.TaintEffect) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect})
	return n
}

func TestTerminated(t *testing.T) {
	done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	pod := func(phase corev1.PodPhase, states ...corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		for i, st := range states {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprint(i)})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: fmt.Sprint(i), State: st})
		}
		return p
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"succeeded, every container terminated", pod(corev1.PodSucceeded, done, done), true},
		{"failed, every container terminated", pod(corev1.PodFailed, done), true},
		{"running", pod(corev1.PodRunning, running), false},
		{"failed by the pod garbage collector, containers last seen running (a gone node)", pod(corev1.PodFailed, running), false},
		{"failed, one container of two still running", pod(corev1.PodFailed, done, running), false},
		{"failed without any container status", func() *corev1.Pod {
			p := pod(corev1.PodFailed)
			p.Spec.Containers = []corev1.Container{{Name: "app"}}
			return p
		}(), false},
		{"succeeded, an init container still running", func() *corev1.Pod {
			p := pod(corev1.PodSucceeded, done)
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: running}}
			return p
		}(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(Terminated(tt.pod)).To(Equal(tt.want))
		})
	}
}
