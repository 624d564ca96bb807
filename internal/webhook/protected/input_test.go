package protected_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestBadWrites sends malformed fences, writes without a fence and label
// changes through the API server, as kubectl would, and checks each message
// and that nothing changed.
func TestBadWrites(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	n := f.waitHolder("db", "a", 0)
	asA := f.asPod(a)
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1"))).To(Succeed())
	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)

	for _, tc := range []struct{ fence, reason string }{
		{"abc", `invalid fence "abc": not a decimal integer`},
		{"-1", `invalid fence "-1": sign not allowed`},
		{"+1", `invalid fence "+1": sign not allowed`},
		{"0", `invalid fence "0": must be positive`},
		{"007", `invalid fence "007": leading zero`},
		{" 42", `invalid fence " 42": whitespace not allowed`},
		{"4.2e1", `invalid fence "4.2e1": not a decimal integer`},
		{"9223372036854775808", `invalid fence "9223372036854775808": out of range for int64`},
		{"٤٢", `invalid fence "٤٢": non-ASCII character`},
	} {
		f.expectDenied(f.writeCM(asA, "state", tc.fence, "bad"), obj+": write rejected: annotation fencedlease.io/fence: "+tc.reason)
	}
	// An empty annotation is present but empty (setFence("") removes it).
	cm := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "state"}, cm)).To(Succeed())
	cm.Annotations[fencingv1alpha1.AnnotationFence] = ""
	f.expectDenied(asA.Update(f.ctx, cm), obj+`: write rejected: annotation fencedlease.io/fence: invalid fence "": empty`)

	// Without a fence, even from the holder pod.
	missing := fmt.Sprintf(`%s: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, obj)
	f.expectDenied(f.writeCM(asA, "state", "", "no fence"), missing)
	f.expectDenied(f.writeCM(f.c, "state", "", "no fence"), missing)

	// Removing or changing the label, even with the current fence.
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "state"}, cm)).To(Succeed())
	delete(cm.Labels, fencingv1alpha1.LabelProtectedBy)
	f.expectDenied(asA.Update(f.ctx, cm), obj+`: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`)
	cm.Labels[fencingv1alpha1.LabelProtectedBy] = "other"
	f.expectDenied(asA.Update(f.ctx, cm), obj+`: write rejected: label fencedlease.io/protected-by=db cannot be changed to "other" (only the operator or a break-glass user can)`)
	// kubectl label --overwrite / kubectl label ...- as a merge patch.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fencedlease.io/protected-by":null}}}`))
	f.expectDenied(f.c.Patch(f.ctx, f.configMap("state", "db", "", ""), patch), obj+`: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`)

	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v1", fenceOf(n)}))
	f.g.Expect(decisions(map[string]string{"resource": "configmaps", "result": "denied", "reason": "malformed_fence"})).To(BeNumerically(">=", 10))

	// A FencedLease that does not exist.
	f.expectDenied(asA.Create(f.ctx, f.secret("creds", "nope", fenceOf(n), "x")),
		fmt.Sprintf(`Secret %s/creds: write with fence %d rejected: FencedLease "nope" not found in namespace %s`, f.ns, n, f.ns))
}

// TestUnprotectedObjectsAreNotSentToTheWebhook: the objectSelector keeps the
// webhook out of every write to an object without the label.
func TestUnprotectedObjectsAreNotSentToTheWebhook(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")

	before := decisions(nil)
	cm := &corev1.ConfigMap{Data: map[string]string{"value": "v1"}}
	cm.Namespace, cm.Name = f.ns, "plain"
	f.g.Expect(f.c.Create(f.ctx, cm)).To(Succeed())
	cm.Data["value"] = "v2"
	f.g.Expect(f.c.Update(f.ctx, cm)).To(Succeed())
	f.g.Expect(f.c.Delete(f.ctx, cm)).To(Succeed())
	f.g.Expect(decisions(nil)).To(Equal(before), "the webhook was called for an unprotected object")

	// The same writes to a protected object are decided by the webhook.
	f.expectDenied(f.c.Create(f.ctx, f.configMap("state", "db", "", "v1")),
		fmt.Sprintf(`ConfigMap %s/state: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, f.ns))
	f.g.Expect(decisions(nil)).To(Equal(before + 1))
}

// TestWebhookDownFailsClosed: with the webhook server down, protected
// objects cannot be written (failurePolicy Fail) while every other object
// can.
func TestWebhookDownFailsClosed(t *testing.T) {
	f := newFixture(t)
	m := f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	f.g.Expect(f.operator.Create(f.ctx, f.configMap("state", "db", "", "v1"))).To(Succeed())
	f.g.Expect(m.Stop()).To(Succeed())

	cm := &corev1.ConfigMap{Data: map[string]string{"value": "v1"}}
	cm.Namespace, cm.Name = f.ns, "plain"
	f.g.Expect(f.c.Create(f.ctx, cm)).To(Succeed())
	cm.Data["value"] = "v2"
	f.g.Expect(f.c.Update(f.ctx, cm)).To(Succeed())

	// Even the operator: nobody decides, so nobody writes.
	err := f.writeCM(f.operator, "state", "", "v2")
	f.g.Expect(err).To(MatchError(ContainSubstring(`Internal error occurred: failed calling webhook "protected.fencedlease.io": failed to call webhook: Post "https://`)))
	f.g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "%v", err)
	f.g.Expect(f.operator.Create(f.ctx, f.secret("creds", "db", "", "x"))).To(MatchError(ContainSubstring(`failed calling webhook "protected.fencedlease.io"`)))
	value, _ := f.storedCM("state")
	f.g.Expect(value).To(Equal("v1"))
}
