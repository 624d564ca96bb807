package protected_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// degraded is "Status Reason: Message" of a FencedLease's Degraded condition.
func (f *fixture) degraded(namespace, name string) string {
	fl := &fencingv1alpha1.FencedLease{}
	if err := f.c.Get(f.ctx, types.NamespacedName{Namespace: namespace, Name: name}, fl); err != nil {
		return err.Error()
	}
	c := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionDegraded)
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

func (f *fixture) waitDegraded(namespace, name, want string) {
	f.t.Helper()
	f.g.Eventually(func() string { return f.degraded(namespace, name) }).WithTimeout(timeout).WithPolling(poll).Should(Equal(want))
}

// TestProtectionUnavailable: a FencedLease in a namespace that the fencing
// webhook does not cover says so (Degraded, ProtectionUnavailable, not
// Ready, and a Warning Event), from the configuration actually installed:
// kube-system, excluded by default; a namespace whose labels the
// namespaceSelector is changed to exclude; any namespace while the
// configuration is not installed. It follows each change without anything
// else happening to the FencedLease.
func TestProtectionUnavailable(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	const where = "webhook protected.fencedlease.io in ValidatingWebhookConfiguration fencedlease-fencing"
	covered := "False AsExpected: "
	f.waitDegraded(f.ns, "db", covered)

	// kube-system, served by an operator whose caches watch it.
	f.startOperator(testenv.ManagerOptions{Namespace: metav1.NamespaceSystem, ReportProtection: true})
	sys := testenv.FencedLease(metav1.NamespaceSystem, f.ns, appLabels, nil)
	f.g.Expect(f.c.Create(f.ctx, sys)).To(Succeed())
	t.Cleanup(func() { f.deleteAndWait(sys) })
	msg := "writes to protected ConfigMaps and Secrets in namespace kube-system are not checked: the namespaceSelector of " + where + " excludes it"
	f.waitDegraded(metav1.NamespaceSystem, sys.Name, "True ProtectionUnavailable: "+msg)
	got := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(sys), got)).To(Succeed())
	ready := meta.FindStatusCondition(got.Status.Conditions, fencingv1alpha1.ConditionReady)
	f.g.Expect(ready).NotTo(BeNil())
	f.g.Expect([]string{string(ready.Status), ready.Message}).To(Equal([]string{"False", "degraded: " + msg}))
	f.g.Eventually(func() []string { return f.eventsIn(metav1.NamespaceSystem, sys.Name) }).WithTimeout(timeout).
		Should(ContainElement(fencingv1alpha1.EventProtectionUnavailable + ": " + msg))

	// The installed configuration is changed to leave out namespaces with a
	// label, and this namespace gets it.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: setup.DefaultFencingConfiguration}, vwc)).To(Succeed())
	original := vwc.DeepCopy()
	t.Cleanup(func() { f.restoreConfiguration(original) })
	vwc.Webhooks[0].NamespaceSelector.MatchExpressions = append(vwc.Webhooks[0].NamespaceSelector.MatchExpressions,
		metav1.LabelSelectorRequirement{Key: "example.com/unfenced", Operator: metav1.LabelSelectorOpDoesNotExist})
	f.g.Expect(f.c.Update(f.ctx, vwc)).To(Succeed())
	f.setNamespaceLabel("example.com/unfenced", "true")
	excluded := fmt.Sprintf("True ProtectionUnavailable: writes to protected ConfigMaps and Secrets in namespace %s are not checked: the namespaceSelector of %s excludes it", f.ns, where)
	f.waitDegraded(f.ns, "db", excluded)
	// And it is true: once the API server has seen the label too, the
	// webhook no longer sees writes there.
	f.g.Eventually(func() error { return f.c.Create(f.ctx, f.configMap("unguarded", "db", "", "by admin")) }).
		WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	f.setNamespaceLabel("example.com/unfenced", "")
	f.waitDegraded(f.ns, "db", covered)

	// The configuration is deleted, then installed again.
	f.g.Expect(f.c.Delete(f.ctx, vwc)).To(Succeed())
	f.waitDegraded(f.ns, "db", fmt.Sprintf("True ProtectionUnavailable: writes to protected ConfigMaps and Secrets in namespace %s are not checked: ValidatingWebhookConfiguration fencedlease-fencing is not installed", f.ns))
	f.restoreConfiguration(original)
	f.waitDegraded(f.ns, "db", covered)
	f.g.Eventually(func() error { return f.writeCM(f.c, "unguarded", "", "by admin again") }).WithTimeout(timeout).WithPolling(poll).Should(
		MatchError(denied + fmt.Sprintf(`ConfigMap %s/unguarded: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, f.ns)))
}

// setNamespaceLabel sets a label of the fixture's namespace ("" removes it).
func (f *fixture) setNamespaceLabel(key, value string) {
	ns := &corev1.Namespace{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: f.ns}, ns)).To(Succeed())
	if value == "" {
		delete(ns.Labels, key)
	} else {
		ns.Labels[key] = value
	}
	f.g.Expect(f.c.Update(f.ctx, ns)).To(Succeed())
}

// restoreConfiguration puts the fencing webhook's configuration back as it
// was, re-creating it if it is gone.
func (f *fixture) restoreConfiguration(original *admissionregistrationv1.ValidatingWebhookConfiguration) {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := f.c.Get(f.ctx, client.ObjectKeyFromObject(original), vwc)
	if apierrors.IsNotFound(err) {
		vwc = original.DeepCopy()
		vwc.ResourceVersion, vwc.UID = "", ""
		f.g.Expect(f.c.Create(f.ctx, vwc)).To(Succeed())
		return
	}
	f.g.Expect(err).NotTo(HaveOccurred())
	vwc.Webhooks = original.Webhooks
	f.g.Expect(f.c.Update(f.ctx, vwc)).To(Succeed())
}

// deleteAndWait deletes a FencedLease and waits until its finalizer is done.
func (f *fixture) deleteAndWait(fl *fencingv1alpha1.FencedLease) {
	f.g.Expect(client.IgnoreNotFound(f.c.Delete(f.ctx, fl))).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKeyFromObject(fl), &fencingv1alpha1.FencedLease{}))
	}).WithTimeout(timeout).WithPolling(poll).Should(BeTrue())
}
