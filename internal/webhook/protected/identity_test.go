package protected_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestHolderIdentity: the fence is bound to the holder pod. A standby that
// copies the current fence, a forged higher fence and a standby's DELETE are
// rejected; the holder's writes and DELETE are accepted.
func TestHolderIdentity(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, asB := f.holderAndStandby()
	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)

	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1 by a"))).To(Succeed())

	// The standby copies the holder's current fence.
	notHolder := fmt.Sprintf(`pod b is not the holder of FencedLease "db" (holder: pod a, fence %d)`, n)
	f.expectDenied(f.writeCM(asB, "state", fenceOf(n), "v2 by b"), fmt.Sprintf("%s: write with fence %d rejected: %s", obj, n, notHolder))
	// A merge patch of the data alone presents the stored fence: same answer.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"data":{"value":"patched by b"}}`))
	f.expectDenied(asB.Patch(f.ctx, f.configMap("state", "db", "", ""), patch), fmt.Sprintf("%s: write with fence %d rejected: %s", obj, n, notHolder))
	f.g.Expect(asB.Create(f.ctx, f.configMap("other", "db", fenceOf(n), "by b"))).To(MatchError(
		denied + fmt.Sprintf("ConfigMap %s/other: write with fence %d rejected: %s", f.ns, n, notHolder)))

	// The holder writes.
	f.g.Expect(f.writeCM(asA, "state", fenceOf(n), "v2 by a")).To(Succeed())
	value, _ := f.storedCM("state")
	f.g.Expect(value).To(Equal("v2 by a"))

	// An administrator's patch that leaves the stored (current) fence in
	// place: the fence is no proof of identity, so it is rejected too.
	annotate := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"by hand"}}}`))
	f.expectDenied(f.user("mallory").Patch(f.ctx, f.configMap("state", "db", "", ""), annotate),
		fmt.Sprintf(`%s: write with fence %d rejected: user "mallory" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
			obj, n))

	// A forged fence higher than any grant: rejected after a fresh read.
	forged := n + 1000
	f.expectDenied(f.writeCM(asA, "state", fenceOf(forged), "forged by a"),
		fmt.Sprintf(`%s: write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, obj, forged, n))
	// From someone who is not a pod, it is not even looked at.
	f.expectDenied(f.writeCM(f.c, "state", fenceOf(forged), "forged by admin"),
		fmt.Sprintf(`%s: write with fence %d rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`,
			obj, forged))

	// DELETE carries no fence: only the holder pod may delete.
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = f.ns, "state"
	f.expectDenied(asB.Delete(f.ctx, cm), fmt.Sprintf("%s: delete rejected: %s", obj, notHolder))
	f.expectDenied(f.c.Delete(f.ctx, cm), fmt.Sprintf(`%s: delete rejected: a delete carries no fence: only the holder pod of FencedLease "db" may delete this object`, obj))
	f.g.Expect(asA.Delete(f.ctx, cm)).To(Succeed())
	f.g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKeyFromObject(cm), cm))).To(BeTrue())

	// One Event series per object and operation (the forged update adds to
	// the series of the first rejected update of the object).
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElements(
		fencingv1alpha1.EventStaleWriteRejected+": "+fmt.Sprintf("%s: write with fence %d rejected: %s", obj, n, notHolder),
		fencingv1alpha1.EventStaleWriteRejected+": "+fmt.Sprintf("ConfigMap %s/other: write with fence %d rejected: %s", f.ns, n, notHolder),
		fencingv1alpha1.EventStaleWriteRejected+": "+fmt.Sprintf("%s: delete rejected: %s", obj, notHolder),
	))
}

// TestPrivilegedCallers: the operator and break-glass principals write
// without a fence, break-glass writes are audited; anyone else needs one.
func TestPrivilegedCallers(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)

	// The operator.
	f.g.Expect(f.operator.Create(f.ctx, f.configMap("state", "db", "", "by the operator"))).To(Succeed())
	f.g.Expect(f.writeCM(f.operator, "state", "", "again by the operator")).To(Succeed())

	// An administrator that is no principal of the webhook.
	f.expectDenied(f.writeCM(f.c, "state", "", "by admin"),
		fmt.Sprintf(`%s: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, obj))

	// Break-glass, by group and by user name: admitted, logged, recorded, counted.
	before := decisions(map[string]string{"resource": "configmaps", "result": "allowed", "reason": "break_glass"})
	carol := f.user("carol", breakGlassGroup)
	f.g.Expect(f.writeCM(carol, "state", "", "repaired by carol")).To(Succeed())
	bob := f.user("bob")
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = f.ns, "state"
	f.g.Expect(bob.Delete(f.ctx, cm)).To(Succeed())
	f.g.Expect(decisions(map[string]string{"resource": "configmaps", "result": "allowed", "reason": "break_glass"})).To(Equal(before + 2))
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElements(
		fencingv1alpha1.EventBreakGlass+": "+fmt.Sprintf("Break-glass UPDATE of %s by user carol, without a fence", obj),
		fencingv1alpha1.EventBreakGlass+": "+fmt.Sprintf("Break-glass DELETE of %s by user bob, without a fence", obj),
	))
	// The operator's writes are not break-glass writes.
	f.g.Expect(f.events("db")).NotTo(ContainElement(ContainSubstring(operatorUser)))
}
