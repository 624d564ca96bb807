//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	timeout = 90 * time.Second
	poll    = 50 * time.Millisecond
	app     = "worker"
	state   = "worker-state"
	// leaseSeconds is short: takeover Safe waits for the old grant to
	// expire.
	leaseSeconds = 3
	denied       = `admission webhook "protected.fencedlease.io" denied the request: `
)

// workspace is one test's namespace, with a watch on it that records every
// moment two pods hold at once or a fence goes back.
type workspace struct {
	t       *testing.T
	ns      string
	checker *testenv.HolderChecker
}

// newWorkspace creates a namespace whose default ServiceAccount may write
// ConfigMaps (RBAC lets it; only fencing stands in the way) and a
// FencedLease app; on failure it prints the namespace's objects and events
// and the operators' logs.
func newWorkspace(t *testing.T, gate bool) *workspace {
	t.Helper()
	return newWorkspaceWith(t, func(fl *fencingv1alpha1.FencedLease) { fl.Spec.ReadinessGate = gate })
}

// newWorkspaceWith is newWorkspace with the FencedLease changed by edit.
func newWorkspaceWith(t *testing.T, edit func(*fencingv1alpha1.FencedLease)) *workspace {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	g.Expect(admin.Create(ctx, ns)).To(Succeed())
	w := &workspace{t: t, ns: ns.Name}
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		_ = admin.Delete(context.Background(), ns)
	})
	g.Expect(admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}},
	})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "default"}},
	})).To(Succeed())
	// The controller manager creates the default ServiceAccount; pods
	// cannot be created before it exists.
	g.Eventually(func() error {
		return admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "default"}, &corev1.ServiceAccount{})
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(admin.Create(ctx, testenv.FencedLease(w.ns, app, map[string]string{"app": app}, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = leaseSeconds
		fl.Spec.Takeover = fencingv1alpha1.TakeoverSafe
		edit(fl)
	}))).To(Succeed())
	watchCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	w.checker, err = testenv.WatchHolders(watchCtx, cl.RestConfig, w.ns)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if v := w.checker.Violations(); len(v) > 0 {
			t.Errorf("the watch saw invariants broken:\n%s", strings.Join(v, "\n"))
		}
	})
	return w
}

func (w *workspace) dump() {
	kubectl := cl.K8sBin + "/kubectl"
	for _, args := range [][]string{
		{"-n", w.ns, "get", "fencedleases,leases,deployments,statefulsets,replicasets,pods,configmaps", "-o", "yaml"},
		{"-n", w.ns, "get", "events", "--sort-by=.lastTimestamp"},
		{"get", "nodes", "-o", "wide"},
	} {
		out, _ := exec.Command(kubectl, append([]string{"--kubeconfig", cl.Kubeconfig}, args...)...).CombinedOutput()
		w.t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	}
	for _, o := range operators {
		w.t.Logf("operator %s (running: %v), last lines of %s:\n%s", o.Name, o.Running(), o.LogFile(), cl.Tail("operator-"+o.Name, 80))
	}
}

// podTemplate is the workload's pod: opted into the pod webhook.
func podTemplate(version string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{"app": app, fencingv1alpha1.LabelInject: "true"},
			Annotations: map[string]string{"e2e/version": version},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{Name: app, Image: "registry.example/worker:" + version,
				Command: []string{"fence", "run", "--", "/worker"}}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			}},
		},
	}
}

func (w *workspace) deployment(replicas int32, strategy appsv1.DeploymentStrategy) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Strategy: strategy,
			Template: podTemplate("1"),
		},
	}
}

// gatedRollout is the rolling update a Deployment needs with the readiness
// gate: only the holder is Ready, so a rollout waiting for new pods to
// become available would stall (docs/workloads.md).
var gatedRollout = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
	RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromString("100%"))}}

// holder waits for a published holder other than the pods in not, and
// returns it with its fence.
func (w *workspace) holder(not ...*corev1.Pod) (*corev1.Pod, int64) {
	w.t.Helper()
	var pod *corev1.Pod
	var fence int64
	NewWithT(w.t).Eventually(func(g Gomega) {
		p, f, ok, err := cluster.Holder(context.Background(), admin, w.ns, app)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue(), "a published holder")
		for _, n := range not {
			g.Expect(p.UID).NotTo(Equal(n.UID), "a holder other than %s", n.Name)
		}
		pod, fence = p, f
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return pod, fence
}

// write writes the protected ConfigMap as the pod, with the fence.
func (w *workspace) write(pod *corev1.Pod, fence int64) error {
	return cluster.WriteAs(context.Background(), cl.RestConfig, pod, state, app, fence, map[string]string{"by": pod.Name})
}

func (w *workspace) expectStale(pod *corev1.Pod, fence, current int64) {
	w.t.Helper()
	NewWithT(w.t).Expect(w.write(pod, fence)).To(MatchError(ContainSubstring(fmt.Sprintf(
		`%sConfigMap %s/%s: write with fence %d rejected: stale holder: FencedLease "%s" is at fence %d`, denied, w.ns, state, fence, app, current))))
}

func (w *workspace) pods() []corev1.Pod {
	w.t.Helper()
	list := &corev1.PodList{}
	NewWithT(w.t).Expect(admin.List(context.Background(), list, client.InNamespace(w.ns), client.MatchingLabels{"app": app})).To(Succeed())
	return list.Items
}

// restoreNodeOnCleanup gives the node back to kwok when the test ends and
// waits until every node is Ready again.
func restoreNodeOnCleanup(t *testing.T) {
	t.Cleanup(func() {
		if err := cl.RestoreNodes(context.Background(), time.Minute); err != nil {
			t.Errorf("restore nodes: %v", err)
		}
	})
}

func holderNow(w *workspace) (*corev1.Pod, int64, bool, error) {
	return cluster.Holder(context.Background(), admin, w.ns, app)
}
