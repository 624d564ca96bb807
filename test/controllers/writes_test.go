package controllers_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// protectedBy labels an object protected by FencedLease widgets.
var protectedBy = map[string]string{fencingv1alpha1.LabelProtectedBy: "widgets"}

// holderLease creates FencedLease widgets with renewal Holder (4 s lease,
// renewed every second) and starts the operator.
func (f *fixture) holderLease() {
	f.startOperator()
	f.g.Expect(admin.Create(f.ctx, testenv.FencedLease(f.ns, "widgets", podLabels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 4
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(1))
	}))).To(Succeed())
}

// holding starts a manager as a new pod, ready since readyFor ago, and
// waits until it holds a grant when wait is set.
func (f *fixture) holding(name string, readyFor time.Duration, o fencedcontroller.Options, wait bool) *inProcess {
	pod := f.pod(name)
	m := f.startManager(pod, nil, o)
	f.ready(pod, readyFor)
	if wait {
		f.g.Eventually(m.mgr.Elected()).WithTimeout(timeout).Should(BeClosed(), "%s holds the grant", name)
	}
	return m
}

// heldFence is the fence of the grant the manager's controllers run under.
func (m *inProcess) heldFence() int64 {
	_, _, f := m.probe.times()
	return f
}

// repairClient acts as the fencing webhook's break-glass user.
func (f *fixture) repairClient() client.Client {
	c, err := testenv.UserClient(env, breakGlassUser, "system:masters")
	f.g.Expect(err).NotTo(HaveOccurred())
	return c
}

// noFencedLeaseAnnotations fails when an object carries an annotation of
// the fencedlease.io/ prefix.
func noFencedLeaseAnnotations(g Gomega, obj client.Object) {
	for k := range obj.GetAnnotations() {
		g.Expect(k).NotTo(HavePrefix("fencedlease.io/"), "%s/%s", obj.GetNamespace(), obj.GetName())
	}
}

// TestFencedClientWritesPodsAndUnprotectedObjects: a fenced controller
// creates, updates, patches and deletes Pods through the manager's client,
// with the operator-state admission policy installed (it forbids
// fencedlease.io/ annotations on pods), and unprotected ConfigMaps, as a
// plain client would: nothing is stamped on them. Before the grant the same
// writes are refused by the client. A partial patch of an object that a
// break-glass user protected without a fence, given without the label, is
// refused by the fencing webhook for its missing fence and sent again,
// stamped: it is admitted, and the object carries the grant's fence.
func TestFencedClientWritesPodsAndUnprotectedObjects(t *testing.T) {
	f := newFixture(t)
	f.allow("pods-configmaps", []string{"pods", "configmaps"}, "get", "list", "watch", "create", "update", "patch", "delete")
	f.holderLease()
	a := f.pod("a")
	m := f.startManager(a, nil, fencedcontroller.Options{})
	c := m.Client()
	worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "worker", Labels: map[string]string{"role": "worker"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work", Image: "busybox"}}}}
	err := c.Create(f.ctx, worker.DeepCopy())
	f.g.Expect(errors.Is(err, fence.ErrNotHolder)).To(BeTrue(), "a Pod written before the grant: %v", err)
	f.ready(a, time.Hour)
	f.g.Eventually(m.mgr.Elected()).WithTimeout(timeout).Should(BeClosed())

	f.g.Expect(c.Create(f.ctx, worker)).To(Succeed())
	worker.Labels["step"] = "updated"
	f.g.Expect(c.Update(f.ctx, worker)).To(Succeed())
	f.g.Expect(c.Patch(f.ctx, worker, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"patched"}}}`)))).To(Succeed())
	stored := &corev1.Pod{}
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(worker), stored)).To(Succeed())
	f.g.Expect(stored.Labels).To(HaveKeyWithValue("step", "updated"))
	f.g.Expect(stored.Annotations).To(HaveKeyWithValue("note", "patched"))
	noFencedLeaseAnnotations(f.g, stored)
	f.g.Expect(c.Delete(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "worker"}})).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(admin.Get(f.ctx, client.ObjectKeyFromObject(worker), &corev1.Pod{}))
	}).WithTimeout(timeout).Should(BeTrue())

	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain"}, Data: map[string]string{"k": "v"}}
	f.g.Expect(c.Create(f.ctx, plain)).To(Succeed())
	plain.Data["k"] = "w"
	f.g.Expect(c.Update(f.ctx, plain)).To(Succeed())
	f.g.Expect(c.Apply(f.ctx, corev1ac.ConfigMap("plain", f.ns).WithData(map[string]string{"applied": "yes"}), client.FieldOwner("widget-controller"))).To(Succeed())
	storedCM := &corev1.ConfigMap{}
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(plain), storedCM)).To(Succeed())
	f.g.Expect(storedCM.Data).To(Equal(map[string]string{"k": "w", "applied": "yes"}))
	noFencedLeaseAnnotations(f.g, storedCM)

	// Protected by a person, without a fence: the controller's partial
	// patch names no label.
	repaired := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "repaired", Labels: protectedBy}, Data: map[string]string{"k": "v"}}
	f.g.Expect(f.repairClient().Create(f.ctx, repaired)).To(Succeed())
	f.g.Expect(c.Patch(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "repaired"}},
		client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"patched"}}`)))).To(Succeed())
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(repaired), repaired)).To(Succeed())
	f.g.Expect(repaired.Data).To(HaveKeyWithValue("k", "patched"))
	f.g.Expect(repaired.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(m.heldFence(), 10)))

	// Once the grant has ended, nothing is sent, protected or not.
	m.stop()
	f.g.Eventually(m.exited).WithTimeout(timeout).Should(BeClosed())
	err = c.Create(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "late"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work", Image: "busybox"}}}})
	f.g.Expect(errors.Is(err, fence.ErrNotHolder)).To(BeTrue(), "%v", err)
}

// twoGrants runs replica a, granted first, and replica b; ahead(a) runs
// while a holds the grant, then a stops and releases it, and b is granted
// a higher fence. It returns both and their fences.
func (f *fixture) twoGrants(ahead func(a *inProcess)) (a, b *inProcess, fa, fb int64) {
	f.holderLease()
	a = f.holding("a", time.Hour, fencedcontroller.Options{ReleaseOnCancel: true}, true)
	b = f.holding("b", time.Minute, fencedcontroller.Options{}, false)
	fa = a.heldFence()
	ahead(a)
	a.stop()
	f.g.Eventually(b.mgr.Elected()).WithTimeout(timeout).Should(BeClosed(), "b is granted once a released")
	fb = b.heldFence()
	f.g.Expect(fb).To(BeNumerically(">", fa))
	return a, b, fa, fb
}

// TestServerSideApplyAcrossGrants: replica a creates a protected ConfigMap
// with field owner widget-controller (an update-type write, whose manager
// then owns the fence annotation); a releases, b is granted a higher
// fence, and b, with the same field owner, applies the ConfigMap: it is
// admitted, and carries b's fence (the client took over the fence
// annotation alone, with force). A conflict with another field manager is
// still returned as it is, and nothing of that manager's is taken.
func TestServerSideApplyAcrossGrants(t *testing.T) {
	f := newFixture(t)
	f.allow("configmaps", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "state", Labels: protectedBy},
		Data: map[string]string{"k": "v"}}
	_, b, _, fb := f.twoGrants(func(a *inProcess) {
		f.g.Expect(a.Client().Create(f.ctx, cm, client.FieldOwner("widget-controller"))).To(Succeed())
	})
	cb := b.Client()
	f.g.Expect(cb.Apply(f.ctx, corev1ac.ConfigMap("state", f.ns).WithLabels(protectedBy).WithData(map[string]string{"k": "v", "b": "applied"}),
		client.FieldOwner("widget-controller"))).To(Succeed())
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	f.g.Expect(cm.Data).To(Equal(map[string]string{"k": "v", "b": "applied"}))
	f.g.Expect(cm.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fb, 10)))

	repair := f.repairClient()
	f.g.Expect(repair.Get(f.ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	cm.Data["k"] = "repaired"
	f.g.Expect(repair.Update(f.ctx, cm, client.FieldOwner("kubectl-edit"))).To(Succeed())
	err := cb.Apply(f.ctx, corev1ac.ConfigMap("state", f.ns).WithLabels(protectedBy).WithData(map[string]string{"k": "v", "b": "applied"}),
		client.FieldOwner("widget-controller"))
	f.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	f.g.Expect(err.Error()).To(ContainSubstring(`conflict with "kubectl-edit"`))
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	f.g.Expect(cm.Data).To(HaveKeyWithValue("k", "repaired"))
}

// TestStatusApplyAcrossGrants: replica a applies a protected Widget's
// status with field owner widget-controller (as the field manager
// "widget-controller;fencedlease.io/fence=<a's>"); b, granted next, applies
// other values with the same field owner: admitted, the status is b's, and
// its fields belong to b's field manager. b's partial patch of the Widget,
// given without the label, carries a's fence over from the stored object;
// the webhook refuses it as stale, and it is sent again, stamped, and
// admitted.
func TestStatusApplyAcrossGrants(t *testing.T) {
	f := newFixture(t)
	f.widgets(1)
	_, b, _, fb := f.twoGrants(func(a *inProcess) {
		ca := a.Client()
		w := &examplesv1alpha1.Widget{}
		f.g.Expect(ca.Get(f.ctx, clientKey(f.ns, "w0"), w)).To(Succeed())
		w.Labels = protectedBy
		f.g.Expect(ca.Update(f.ctx, w)).To(Succeed())
		f.g.Expect(ca.Status().Apply(f.ctx, widgetStatus(f.ns, "w0", "under a", a.heldFence()), client.FieldOwner("widget-controller"))).To(Succeed())
	})
	cb := b.Client()
	f.g.Expect(cb.Status().Apply(f.ctx, widgetStatus(f.ns, "w0", "under b", fb), client.FieldOwner("widget-controller"))).To(Succeed())
	w := &examplesv1alpha1.Widget{}
	f.g.Expect(admin.Get(f.ctx, clientKey(f.ns, "w0"), w)).To(Succeed())
	f.g.Expect(w.Status.Message).To(Equal("under b"))
	f.g.Expect(w.Status.Fence).To(Equal(fb))
	var managers []string
	for _, mf := range w.ManagedFields {
		if mf.Subresource == "status" {
			managers = append(managers, mf.Manager)
		}
	}
	f.g.Expect(managers).To(ContainElement(fieldmanager.Format("widget-controller", fb)))

	f.g.Expect(cb.Patch(f.ctx, &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "w0"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"message":"patched by b"}}`)))).To(Succeed())
	f.g.Expect(admin.Get(f.ctx, clientKey(f.ns, "w0"), w)).To(Succeed())
	f.g.Expect(w.Spec.Message).To(Equal("patched by b"))
	f.g.Expect(w.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fb, 10)))
}

// widgetStatus is an apply configuration of a Widget's status, with the
// protected-by label (the client then stamps it at once).
func widgetStatus(ns, name, message string, fenceValue int64) runtime.ApplyConfiguration {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(examplesv1alpha1.GroupVersion.String())
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(protectedBy)
	u.Object["status"] = map[string]any{"message": message, "fence": fenceValue}
	return client.ApplyConfigurationFromUnstructured(u)
}

// TestFencedDeleteNeedsNoPatchForUnprotectedObjects: the holder's service
// account may delete ConfigMaps but not patch them. An unprotected
// ConfigMap, given without labels, is deleted with one delete. A delete of
// a protected one needs its fence written first: refused, for want of
// patch permission, as a dry run too, and the dry run writes nothing.
func TestFencedDeleteNeedsNoPatchForUnprotectedObjects(t *testing.T) {
	f := newFixture(t)
	f.allow("configmaps", []string{"configmaps"}, "get", "list", "watch", "create", "update", "delete")
	f.holderLease()
	m := f.holding("a", time.Hour, fencedcontroller.Options{}, true)
	c := m.Client()

	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain"}}
	f.g.Expect(admin.Create(f.ctx, plain)).To(Succeed())
	f.g.Expect(c.Delete(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain"}})).To(Succeed())
	f.g.Expect(apierrors.IsNotFound(admin.Get(f.ctx, client.ObjectKeyFromObject(plain), plain))).To(BeTrue())

	state := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "state", Labels: protectedBy}}
	f.g.Expect(c.Create(f.ctx, state)).To(Succeed())
	unchanged := f.unchanged(state)
	err := c.Delete(f.ctx, state.DeepCopy(), client.DryRunAll)
	f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	f.g.Expect(err.Error()).To(ContainSubstring(`cannot patch resource "configmaps"`))
	unchanged()
	err = c.Delete(f.ctx, state.DeepCopy())
	f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	f.g.Expect(err.Error()).To(ContainSubstring(`cannot patch resource "configmaps"`))
	unchanged()
}

// unchanged returns a check that obj is stored as it is now: the same
// resourceVersion and annotations.
func (f *fixture) unchanged(obj *corev1.ConfigMap) func() {
	before := &corev1.ConfigMap{}
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(obj), before)).To(Succeed())
	return func() {
		f.t.Helper()
		now := &corev1.ConfigMap{}
		f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(before), now)).To(Succeed())
		f.g.Expect(now.ResourceVersion).To(Equal(before.ResourceVersion), "a dry run wrote")
		f.g.Expect(now.Annotations).To(Equal(before.Annotations))
	}
}

// TestFencedDeleteDryRunWritesNothing: a dry-run delete of a protected
// ConfigMap last written under an older fence succeeds, as the real one
// would (it writes the fence first, then deletes), and writes nothing: the
// object keeps its resourceVersion and its older fence. The real delete of
// it, given without labels, is refused by the webhook (not last written
// with the current fence) and then made the protected way. A dry-run
// delete that the webhook refuses (the FencedLease the label names does
// not exist) is refused with the real delete's answer, and writes nothing.
func TestFencedDeleteDryRunWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.allow("configmaps", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch", "delete")
	f.holderLease()
	m := f.holding("a", time.Hour, fencedcontroller.Options{}, true)
	c := m.Client()
	repair := f.repairClient()

	state := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "state", Labels: protectedBy,
		Annotations: map[string]string{fencingv1alpha1.AnnotationFence: strconv.FormatInt(m.heldFence()-1, 10)}}}
	f.g.Expect(repair.Create(f.ctx, state)).To(Succeed())
	unchanged := f.unchanged(state)
	f.g.Expect(c.Delete(f.ctx, state.DeepCopy(), client.DryRunAll)).To(Succeed())
	unchanged()
	f.g.Expect(c.Delete(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "state"}}, client.DryRunAll)).To(Succeed())
	unchanged()
	f.g.Expect(c.Delete(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "state"}})).To(Succeed())
	f.g.Expect(apierrors.IsNotFound(admin.Get(f.ctx, client.ObjectKeyFromObject(state), &corev1.ConfigMap{}))).To(BeTrue())

	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "foreign",
		Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "other"}}}
	f.g.Expect(repair.Create(f.ctx, foreign)).To(Succeed())
	unchanged = f.unchanged(foreign)
	dryErr := c.Delete(f.ctx, foreign.DeepCopy(), client.DryRunAll)
	f.g.Expect(dryErr).To(HaveOccurred())
	f.g.Expect(dryErr.Error()).To(ContainSubstring(`FencedLease "other" not found in namespace ` + f.ns))
	unchanged()
	err := c.Delete(f.ctx, foreign.DeepCopy())
	f.g.Expect(err).To(MatchError(dryErr.Error()), "the dry run's answer is the real delete's")
	unchanged()
}
