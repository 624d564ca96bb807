package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestOperatorRunsFromItsImage: the chart installed with the operator's
// image runs two operator pods on the real node, in the pod network; the API
// server calls their webhooks through the webhook Service (at its
// endpoints), with the certificate the operator provisions. A workload pod
// there gets its token volume from the pod webhook, its process reads the
// fence the operator granted from the kubelet's file, and the protected
// ConfigMap takes the holder's write with that fence and refuses a write
// without one.
func TestOperatorRunsFromItsImage(t *testing.T) {
	if _, err := os.Stat(harness.Tool("helm")); err != nil {
		t.Fatalf("%v: make helm builds it", err)
	}
	c, _ := realNodeCluster(t, "real-node-1")
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	in, err := c.InstallChartInCluster(ctx, harness.Tool("helm"), "../../charts/fencedlease", "fencedlease", "fencedlease-system")
	g.Expect(err).NotTo(HaveOccurred())
	admin, err := client.New(c.RestConfig, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	pods := &corev1.PodList{}
	g.Expect(admin.List(ctx, pods, client.InNamespace(in.Namespace), client.MatchingLabels(in.Deployment.Spec.Selector.MatchLabels))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(2))
	pn, err := c.podNet()
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range pods.Items {
		g.Expect(p.Spec.NodeName).To(Equal("real-node-1"))
		g.Expect(p.Spec.HostNetwork).To(BeFalse())
		g.Expect(p.Spec.Containers[0].Image).To(Equal(OperatorImage))
		g.Expect(p.Status.PodIP).To(HavePrefix(fmt.Sprintf("10.%d.1.", pn.second)), "an address of the node's pod network")
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "work-"}}
	g.Expect(admin.Create(ctx, ns)).To(Succeed())
	g.Expect(admin.Create(ctx, testenv.FencedLease(ns.Name, "db", map[string]string{"app": "db"}, nil))).To(Succeed())
	// RBAC lets the workload write ConfigMaps: only fencing stands in the way.
	g.Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}}}})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: "default"}}})).To(Succeed())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "db-0",
		Labels: map[string]string{"app": "db", fencingv1alpha1.LabelInject: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "fencedlease.local/workload:dev", ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", `exec /fence run -- /bin/sh -c 'echo "started $FENCE_TOKEN"; while :; do sleep 1; done'`}}}}}
	OnRealNode(&pod.Spec)
	pod.Spec.HostNetwork = false
	// Created as soon as the webhook answers: the operator pods are Ready,
	// the API server's endpoints may lag a moment.
	g.Eventually(func() error { return admin.Create(ctx, pod) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(pod.Spec.Volumes).To(ContainElement(HaveField("Name", "fencedlease-token")), "the pod webhook, called through its Service, injected the token volume")

	var fence int64
	g.Eventually(func(g Gomega) {
		p, f, ok, err := Holder(ctx, admin, ns.Name, "db")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue())
		g.Expect(p.Name).To(Equal(pod.Name))
		fence = f
	}).WithTimeout(time.Minute).Should(Succeed())
	g.Eventually(func() (string, error) { return c.ContainerLog("real-node-1", pod, "db") }).WithTimeout(time.Minute).
		Should(ContainSubstring(fmt.Sprintf("started %d\n", fence)), "the process reads the granted fence from the kubelet's file")

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "state",
		Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}}}
	err = admin.Create(ctx, cm)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a write without a fence is refused: %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`admission webhook "protected.fencedlease.io" denied the request`))
	g.Expect(WriteAs(ctx, c.RestConfig, pod, "state", "db", fence, map[string]string{"by": pod.Name})).To(Succeed())
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(cm.Data).To(Equal(map[string]string{"by": pod.Name}))
}

// realNodeCluster starts a cluster with one kwok node and the real nodes,
// stopped when the test ends unless down stopped it first.
func realNodeCluster(t *testing.T, realNodes ...string) (c *Cluster, down func() error) {
	t.Helper()
	harness.Needs(t, harness.ControlPlane)
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root")
	}
	images := ImageTarballs(harness.ImagesDir())
	for _, f := range append([]string{harness.Kubelet()}, images...) {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: make images and hack/tools.sh kubelet build what a real node needs", err)
		}
	}
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		bin = harness.ControlPlaneDir()
	}
	c, err := New(Config{Dir: t.TempDir(), K8sBin: bin, Kwok: harness.Tool("kwok"), Nodes: []string{"kwok-node-1"},
		RealNodes: realNodes, Kubelet: harness.Kubelet(), Images: images})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := c.Up(ctx); err != nil {
		_ = c.Down()
		t.Fatalf("start the cluster with real nodes %s: %v", strings.Join(realNodes, ", "), err)
	}
	t.Logf("control plane, kwok node and real nodes %s Ready in %s", strings.Join(realNodes, ", "), time.Since(start).Round(100*time.Millisecond))
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = c.Down()
		}
	})
	return c, func() error {
		err := c.Down()
		downed = err == nil
		return err
	}
}
