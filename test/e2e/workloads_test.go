//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/webhook/podinject"
)

// TestDeployment: a three-replica Deployment with the readiness gate. The
// pod webhook injects the token files and the gate into the pods the
// ReplicaSet creates; one pod is granted, only it is Ready, only it may
// write; its pod is deleted and the ReplicaSet replaces it, a standby takes
// over with a higher fence, and the old holder, still terminating, is
// rejected.
func TestDeployment(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, true)
	g.Expect(admin.Create(ctx, w.deployment(3, gatedRollout))).To(Succeed())
	h1, f1 := w.holder()

	t.Run("the pod webhook injects into the ReplicaSet's pods", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(w.pods).WithTimeout(timeout).WithPolling(poll).Should(HaveLen(3))
		for _, p := range w.pods() {
			g.Expect(metav1.GetControllerOf(&p)).To(HaveField("Kind", "ReplicaSet"), p.Name)
			g.Expect(p.Spec.ReadinessGates).To(ContainElement(podinject.ReadinessGate()), p.Name)
			var volume string
			for _, v := range p.Spec.Volumes {
				if v.DownwardAPI != nil {
					volume = v.Name
				}
			}
			g.Expect(volume).NotTo(BeEmpty(), "pod %s has a downward-API volume", p.Name)
			g.Expect(p.Spec.Containers[0].VolumeMounts).To(ContainElement(And(
				HaveField("Name", volume), HaveField("MountPath", "/etc/fencedlease"))), p.Name)
		}
	})
	t.Run("only the holder is Ready", func(t *testing.T) {
		NewWithT(t).Eventually(func(g Gomega) {
			for _, p := range w.pods() {
				g.Expect(podReady(&p)).To(Equal(p.UID == h1.UID), "pod %s Ready", p.Name)
				g.Expect(podCondition(&p, corev1.ContainersReady)).To(BeTrue(), "pod %s ContainersReady", p.Name)
			}
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	g.Expect(w.write(h1, f1)).To(Succeed())
	var standby *corev1.Pod
	for _, p := range w.pods() {
		if p.UID != h1.UID {
			standby = &p
			break
		}
	}
	g.Expect(w.write(standby, f1)).To(MatchError(ContainSubstring(fmt.Sprintf("%sConfigMap %s/%s: write with fence %d rejected: pod %s is not the holder",
		denied, w.ns, state, f1, standby.Name))))

	// The pod has 30s to stop: it still exists, and its token still
	// authenticates it, after the next grant.
	g.Expect(admin.Delete(ctx, h1, client.GracePeriodSeconds(30))).To(Succeed())
	h2, f2 := w.holder(h1)
	g.Expect(f2).To(BeNumerically(">", f1))
	g.Eventually(func(g Gomega) {
		live := 0
		for _, p := range w.pods() {
			if p.DeletionTimestamp == nil {
				live++
			}
		}
		g.Expect(live).To(Equal(3), "the ReplicaSet replaced the deleted pod")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	w.expectStale(h1, f1, f2)
	g.Expect(w.write(h2, f2)).To(Succeed())
	g.Eventually(func() bool { return podReady(get(t, h2)) }).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the new holder becomes Ready")
}

// TestDeploymentRollingUpdate: a rolling update replaces every pod; the
// holder moves to a pod of the new ReplicaSet, every new holder's fence is
// higher than the last, and the watch never sees two holders.
func TestDeploymentRollingUpdate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, false)
	dep := w.deployment(3, appsv1.DeploymentStrategy{})
	g.Expect(admin.Create(ctx, dep)).To(Succeed())
	h1, f1 := w.holder()
	// A patch, not an update: the Deployment controller writes the status
	// meanwhile, and an update of the copy read before would conflict.
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
	base := dep.DeepCopy()
	dep.Spec.Template = podTemplate("2")
	g.Expect(admin.Patch(ctx, dep, client.MergeFrom(base))).To(Succeed())
	fences := w.followHolders(func(g Gomega, holder *corev1.Pod) {
		cur := &appsv1.Deployment{}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(dep), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(BeNumerically(">=", dep.Generation))
		g.Expect(cur.Status.UpdatedReplicas).To(BeEquivalentTo(3))
		g.Expect(cur.Status.Replicas).To(BeEquivalentTo(3))
		g.Expect(holder.Annotations).To(HaveKeyWithValue("e2e/version", "2"), "the holder is a pod of the new template")
	}, f1)
	g.Expect(len(fences)).To(BeNumerically(">=", 2), "the holder moved")
	h, f := w.holder()
	g.Expect(h.UID).NotTo(Equal(h1.UID))
	g.Expect(w.write(h, f)).To(Succeed())
	w.expectStale(h1, f1, f)
}

// TestStatefulSet: a StatefulSet's pods compete the same way; its rolling
// update replaces them one at a time, highest ordinal first, under the same
// names: the holder moves, fences grow, never two holders.
func TestStatefulSet(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, false)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: app},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](3),
			ServiceName:         app,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            podTemplate("1"),
		},
	}
	g.Expect(admin.Create(ctx, sts)).To(Succeed())
	h1, f1 := w.holder()
	g.Expect(metav1.GetControllerOf(h1)).To(HaveField("Kind", "StatefulSet"))
	g.Expect(w.write(h1, f1)).To(Succeed())

	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
	base := sts.DeepCopy()
	sts.Spec.Template = podTemplate("2")
	g.Expect(admin.Patch(ctx, sts, client.MergeFrom(base))).To(Succeed()) // as for the Deployment
	fences := w.followHolders(func(g Gomega, holder *corev1.Pod) {
		cur := &appsv1.StatefulSet{}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(sts), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(BeNumerically(">=", sts.Generation))
		g.Expect(cur.Status.UpdatedReplicas).To(BeEquivalentTo(3))
		g.Expect(cur.Status.CurrentRevision).To(Equal(cur.Status.UpdateRevision))
		g.Expect(holder.Annotations).To(HaveKeyWithValue("e2e/version", "2"))
	}, f1)
	g.Expect(len(fences)).To(BeNumerically(">=", 2), "the holder moved")
	h, f := w.holder()
	g.Expect(w.write(h, f)).To(Succeed())
}

// TestScaleToZeroAndBack: with no pod left the lease is not held; scaled
// back, a new pod is granted with a fence higher than any before.
func TestScaleToZeroAndBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, false)
	dep := w.deployment(2, appsv1.DeploymentStrategy{})
	g.Expect(admin.Create(ctx, dep)).To(Succeed())
	h1, f1 := w.holder()
	g.Expect(w.write(h1, f1)).To(Succeed())

	scale(t, dep, 0)
	g.Eventually(w.pods).WithTimeout(timeout).WithPolling(poll).Should(BeEmpty())
	g.Eventually(func(g Gomega) {
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: app}, fl)).To(Succeed())
		g.Expect(fl.Status.Holder).To(BeNil())
		g.Expect(fl.Status.Candidates).To(BeEquivalentTo(0))
		held := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionHeld)
		g.Expect(held).NotTo(BeNil())
		g.Expect(held.Status).To(Equal(metav1.ConditionFalse))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	scale(t, dep, 2)
	h2, f2 := w.holder(h1)
	g.Expect(f2).To(BeNumerically(">", f1))
	g.Expect(w.write(h2, f2)).To(Succeed())
}

// followHolders records every new holder until done passes for the
// current one, checking that each fence is higher than the one before; it
// returns the fences seen, from after.
func (w *workspace) followHolders(done func(Gomega, *corev1.Pod), after int64) []int64 {
	w.t.Helper()
	fences := []int64{after}
	NewWithT(w.t).Eventually(func(g Gomega) {
		p, f, ok, err := holderNow(w)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue())
		if last := fences[len(fences)-1]; f != last {
			if f < last {
				w.t.Errorf("fence went back from %d to %d", last, f)
			}
			fences = append(fences, f)
		}
		done(g, p)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return fences
}

func scale(t *testing.T, dep *appsv1.Deployment, n int32) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(admin.Get(context.Background(), client.ObjectKeyFromObject(dep), dep)).To(Succeed())
	// A patch, as kubectl scale sends: an update would conflict with the
	// Deployment controller's writes in between.
	base := dep.DeepCopy()
	dep.Spec.Replicas = ptr.To(n)
	g.Expect(admin.Patch(context.Background(), dep, client.MergeFrom(base))).To(Succeed())
}

func get(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	NewWithT(t).Expect(admin.Get(context.Background(), client.ObjectKeyFromObject(pod), p)).To(Succeed())
	return p
}

func podReady(p *corev1.Pod) bool { return podCondition(p, corev1.PodReady) }

func podCondition(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
