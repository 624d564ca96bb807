//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/cluster"
)

// TestNodeFailure: the holder's node stops its heartbeats (kwok no longer
// renews its Lease). The node lifecycle controller marks it lost after the
// grace period while the pod still looks Ready to the API; the operator
// counts the holder as gone and grants a pod on another node, with a higher
// fence. The old holder, cut off from its node but not from the API server,
// is rejected.
func TestNodeFailure(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, true)
	g.Expect(admin.Create(ctx, w.deployment(3, gatedRollout))).To(Succeed())
	h1, f1 := w.holder()
	// Pods spread across the nodes: at least one candidate elsewhere.
	g.Eventually(func(g Gomega) {
		others := 0
		for _, p := range w.pods() {
			if p.Spec.NodeName != "" && p.Spec.NodeName != h1.Spec.NodeName && podCondition(&p, corev1.ContainersReady) {
				others++
			}
		}
		g.Expect(others).To(BeNumerically(">=", 1))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(w.write(h1, f1)).To(Succeed())

	restoreNodeOnCleanup(t)
	g.Expect(cl.FailNode(ctx, h1.Spec.NodeName)).To(Succeed())
	g.Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: h1.Spec.NodeName}, n)).To(Succeed())
		g.Expect(cluster.NodeReady(n)).To(BeFalse())
	}).WithTimeout(nodeGrace+timeout).WithPolling(poll).Should(Succeed(), "the node is marked lost")
	h2, f2 := w.holder(h1)
	g.Expect(h2.Spec.NodeName).NotTo(Equal(h1.Spec.NodeName))
	g.Expect(f2).To(BeNumerically(">", f1))
	// The old pod still exists, with its containers ready as far as the
	// API knows: only the node's state tells it is gone.
	old := get(t, h1)
	g.Expect(old.DeletionTimestamp).To(BeNil())
	g.Expect(podCondition(old, corev1.ContainersReady)).To(BeTrue())
	w.expectStale(h1, f1, f2)
	g.Expect(w.write(h2, f2)).To(Succeed())
}

// TestOperatorRestartDuringHandoff: the holder's pod is deleted and every
// operator process crashes at once, in the middle of the handoff. While
// they are down, protected writes fail closed. Restarted, they finish the
// handoff with a higher fence, and the watch never sees two holders.
func TestOperatorRestartDuringHandoff(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, false)
	g.Expect(admin.Create(ctx, w.deployment(3, appsv1.DeploymentStrategy{}))).To(Succeed())
	h1, f1 := w.holder()
	g.Expect(w.write(h1, f1)).To(Succeed())

	g.Expect(admin.Delete(ctx, h1, client.GracePeriodSeconds(30))).To(Succeed())
	for _, o := range operators {
		g.Expect(o.Kill()).To(Succeed())
	}
	t.Cleanup(func() { restartOperators(t) })
	// No webhook answers: the fencing webhook fails closed.
	err := w.write(h1, f1)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "protected.fencedlease.io"`))

	restartOperators(t)
	h2, f2 := w.holder(h1)
	g.Expect(f2).To(BeNumerically(">", f1))
	g.Expect(w.write(h2, f2)).To(Succeed())
	w.expectStale(h1, f1, f2)
}

// TestWebhookReplicaDown: one of the two operator replicas is killed. Every
// admission call still reaches a webhook that answers — protected writes
// are accepted and rejected as before, and new pods are still injected —
// through the remaining replica.
func TestWebhookReplicaDown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, false)
	dep := w.deployment(2, appsv1.DeploymentStrategy{})
	g.Expect(admin.Create(ctx, dep)).To(Succeed())
	h, f := w.holder()
	var standby *corev1.Pod
	g.Eventually(func() *corev1.Pod {
		for _, p := range w.pods() {
			if p.UID != h.UID && p.DeletionTimestamp == nil {
				standby = &p
			}
		}
		return standby
	}).WithTimeout(timeout).WithPolling(poll).ShouldNot(BeNil())

	// Every replica serves the webhooks (the chart runs two so that the
	// webhooks, which fail closed, stay available), not only the leader.
	g.Eventually(func(g Gomega) {
		for _, o := range operators {
			g.Expect(o.Ready()).To(Succeed(), "operator replica %s is Ready (leader or not)", o.Name)
		}
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(Succeed())
	down, up := operators[1], operators[0]
	g.Expect(down.Kill()).To(Succeed())
	t.Cleanup(func() { restartOperators(t) })
	// The process's last threads may still hold its sockets for a moment
	// after its main thread is a zombie.
	g.Eventually(func() error {
		c, err := net.DialTimeout("tcp", down.WebhookAddr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}).WithTimeout(10*time.Second).WithPolling(poll).Should(HaveOccurred(), "replica %s no longer listens", down.Name)
	g.Expect(up.Ready()).To(Succeed())
	for i := range 10 {
		g.Expect(w.write(h, f)).To(Succeed(), "write %d of the holder", i)
		err := w.write(standby, f)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "write %d of the standby: %v", i, err)
		g.Expect(err.Error()).To(ContainSubstring(denied), "the webhook answered write %d of the standby", i)
	}
	scale(t, dep, 3)
	g.Eventually(func(g Gomega) {
		pods := w.pods()
		g.Expect(pods).To(HaveLen(3))
		for _, p := range pods {
			g.Expect(p.Spec.Volumes).To(ContainElement(HaveField("DownwardAPI", Not(BeNil()))), "pod %s was injected", p.Name)
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// restartOperators starts every operator replica that is not running, on
// its own port and pod, and waits until one serves.
func restartOperators(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for i, o := range operators {
		if o.Running() {
			continue
		}
		_, port, err := net.SplitHostPort(o.WebhookAddr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if operators[i], err = cl.StartOperator(ctx, install, manager, o.Name, p); err != nil {
			t.Fatalf("restart operator %s: %v", o.Name, err)
		}
	}
	if err := waitServing(ctx); err != nil {
		t.Fatal(fmt.Errorf("operators after a restart: %w", err))
	}
}
