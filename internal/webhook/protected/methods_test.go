package protected_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestWriteMethods: server-side apply, JSON patch and DELETECOLLECTION reach
// the webhook as the CREATE, UPDATE and DELETE they are, and are decided by
// the same rules: accepted from the holder with its fence, rejected from
// anyone else, whatever the method.
func TestWriteMethods(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, asB := f.holderAndStandby()
	notHolder := fmt.Sprintf(`pod b is not the holder of FencedLease "db" (holder: pod a, fence %d)`, n)

	// Server-side apply: a CREATE, then UPDATEs, each with the writer's
	// fence in the applied configuration.
	apply := func(c client.Client, name, fence, value string) error {
		ac := corev1ac.ConfigMap(name, f.ns).
			WithLabels(map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}).
			WithAnnotations(map[string]string{fencingv1alpha1.AnnotationFence: fence}).
			WithData(map[string]string{"value": value})
		return c.Apply(f.ctx, ac, client.FieldOwner("singleton"), client.ForceOwnership)
	}
	f.expectDenied(apply(asB, "applied", fenceOf(n), "by b"),
		fmt.Sprintf("ConfigMap %s/applied: write with fence %d rejected: %s", f.ns, n, notHolder))
	f.g.Expect(apply(asA, "applied", fenceOf(n), "v1 by a")).To(Succeed())
	f.g.Expect(apply(asA, "applied", fenceOf(n), "v2 by a")).To(Succeed())
	f.expectDenied(apply(asB, "applied", fenceOf(n), "v3 by b"),
		fmt.Sprintf("ConfigMap %s/applied: write with fence %d rejected: %s", f.ns, n, notHolder))
	f.expectDenied(apply(f.c, "applied", fenceOf(n), "v3 by admin"),
		fmt.Sprintf(`ConfigMap %s/applied: write with fence %d rejected: user "admin" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`, f.ns, n))
	value, stored := f.storedCM("applied")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by a", fenceOf(n)}))

	// JSON patch: the stored fence is carried over unless the patch changes
	// it, so the holder may patch data alone; the label stays.
	jsonPatch := func(c client.Client, name, patch string) error {
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = f.ns, name
		return c.Patch(f.ctx, cm, client.RawPatch(types.JSONPatchType, []byte(patch)))
	}
	f.g.Expect(jsonPatch(asA, "applied", `[{"op":"replace","path":"/data/value","value":"v3 by a"}]`)).To(Succeed())
	f.expectDenied(jsonPatch(asB, "applied", `[{"op":"replace","path":"/data/value","value":"v4 by b"}]`),
		fmt.Sprintf("ConfigMap %s/applied: write with fence %d rejected: %s", f.ns, n, notHolder))
	f.expectDenied(jsonPatch(asA, "applied", `[{"op":"remove","path":"/metadata/labels/fencedlease.io~1protected-by"}]`),
		fmt.Sprintf(`ConfigMap %s/applied: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`, f.ns))
	f.expectDenied(jsonPatch(asA, "applied", `[{"op":"remove","path":"/metadata/annotations/fencedlease.io~1fence"}]`),
		fmt.Sprintf(`ConfigMap %s/applied: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, f.ns))
	f.expectDenied(jsonPatch(asA, "applied", fmt.Sprintf(`[{"op":"replace","path":"/metadata/annotations/fencedlease.io~1fence","value":"%d"}]`, n-1)),
		fmt.Sprintf(`ConfigMap %s/applied: write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, f.ns, n-1, n))
	value, stored = f.storedCM("applied")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v3 by a", fenceOf(n)}))

	// DELETECOLLECTION deletes item by item, each a DELETE the webhook
	// decides: an administrator's removes the unprotected ConfigMap and
	// fails on the protected one (the API server goes through the items in
	// name order and stops at the first error), the holder's removes them.
	f.g.Expect(asA.Create(f.ctx, f.secret("creds", "db", fenceOf(n), "s1"))).To(Succeed())
	plain := &corev1.ConfigMap{Data: map[string]string{"value": "v1"}}
	plain.Namespace, plain.Name = f.ns, "a-plain"
	f.g.Expect(f.c.Create(f.ctx, plain)).To(Succeed())
	err := f.c.DeleteAllOf(f.ctx, &corev1.ConfigMap{}, client.InNamespace(f.ns))
	f.expectDenied(err, fmt.Sprintf(`ConfigMap %s/applied: delete rejected: a delete carries no fence: only the holder pod of FencedLease "db" may delete this object`, f.ns))
	f.g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKeyFromObject(plain), plain))).To(BeTrue(), "the unprotected ConfigMap is deleted")
	value, _ = f.storedCM("applied")
	f.g.Expect(value).To(Equal("v3 by a"))
	f.expectDenied(asB.DeleteAllOf(f.ctx, &corev1.Secret{}, client.InNamespace(f.ns)),
		fmt.Sprintf("Secret %s/creds: delete rejected: %s", f.ns, notHolder))
	f.g.Expect(asA.DeleteAllOf(f.ctx, &corev1.ConfigMap{}, client.InNamespace(f.ns), client.MatchingLabels{fencingv1alpha1.LabelProtectedBy: "db"})).To(Succeed())
	f.g.Expect(asA.DeleteAllOf(f.ctx, &corev1.Secret{}, client.InNamespace(f.ns), client.MatchingLabels{fencingv1alpha1.LabelProtectedBy: "db"})).To(Succeed())
	var cms corev1.ConfigMapList
	f.g.Expect(f.c.List(f.ctx, &cms, client.InNamespace(f.ns), client.MatchingLabels{fencingv1alpha1.LabelProtectedBy: "db"})).To(Succeed())
	f.g.Expect(cms.Items).To(BeEmpty())
	var secrets corev1.SecretList
	f.g.Expect(f.c.List(f.ctx, &secrets, client.InNamespace(f.ns), client.MatchingLabels{fencingv1alpha1.LabelProtectedBy: "db"})).To(Succeed())
	f.g.Expect(secrets.Items).To(BeEmpty())
}

// TestFenceOnAnUnprotectedObjectOrdersNothing: whoever may write ConfigMaps
// can put any fence on one that is not protected; the holder can still
// protect it, with its own lower fence. Once protected, the order holds.
func TestFenceOnAnUnprotectedObjectOrdersNothing(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	n := f.waitHolder("db", "a", 0)
	asA := f.asPod(a)
	poisoned := &corev1.ConfigMap{Data: map[string]string{"value": "v0"}}
	poisoned.Namespace, poisoned.Name = f.ns, "state"
	poisoned.Annotations = map[string]string{fencingv1alpha1.AnnotationFence: "9223372036854775807"}
	f.g.Expect(f.c.Create(f.ctx, poisoned)).To(Succeed())

	cm := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(poisoned), cm)).To(Succeed())
	cm.Labels = map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}
	cm.Annotations[fencingv1alpha1.AnnotationFence] = fenceOf(n)
	cm.Data["value"] = "v1 by a"
	f.g.Expect(asA.Update(f.ctx, cm)).To(Succeed())
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v1 by a", fenceOf(n)}))
	f.g.Expect(f.writeCM(asA, "state", fenceOf(n), "v2 by a")).To(Succeed())
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n-1), "v3"), fmt.Sprintf(
		`ConfigMap %s/state: write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, f.ns, n-1, n))
}
