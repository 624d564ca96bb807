package policy_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func statusDenied(ns, user string) string {
	return fmt.Sprintf(`FencedLease %s/db: the status is written by the fencedlease operator only (the fencing webhook trusts it): user %q may not change it`, ns, user)
}

// TestFencedLeaseStatus: the fencing webhook admits the writes of the pod
// that the status names as holder. Nobody but the operator writes the
// status, by merge patch, JSON patch or server-side apply, so nobody can
// name their own pod there.
func TestFencedLeaseStatus(t *testing.T) {
	f := newFixture(t)
	ref := &fencingv1alpha1.FencedLease{}
	ref.Namespace, ref.Name = f.ns, "db"
	const object = `fencedleases.fencing.fencedlease.io "db"`
	for _, c := range f.callers() {
		t.Run(c.who, func(t *testing.T) {
			g := NewWithT(t)
			merge := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"holder":{"podName":"b","podUID":%q},"fence":%d}}`, f.b.UID, f.fence))
			expectDenied(g, c.c.Status().Patch(f.ctx, ref.DeepCopy(), merge), object, statusDenied(f.ns, c.user))
			jsonPatch := client.RawPatch(types.JSONPatchType, fmt.Appendf(nil, `[{"op":"replace","path":"/status/holder/podUID","value":%q}]`, f.b.UID))
			expectDenied(g, c.c.Status().Patch(f.ctx, ref.DeepCopy(), jsonPatch), object, statusDenied(f.ns, c.user))
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedLease",
				"metadata": map[string]any{"namespace": f.ns, "name": "db"},
				"status":   map[string]any{"fence": f.fence + 1},
			}}
			expectDenied(g, c.c.Status().Apply(f.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("intruder"), client.ForceOwnership),
				object, statusDenied(f.ns, c.user))
			// Writing the object itself is still theirs (the CRD's status
			// subresource keeps the status out of it).
			note := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/note":"x"}}}`))
			g.Expect(c.c.Patch(f.ctx, ref.DeepCopy(), note)).To(Succeed())
		})
	}
	fl := f.fencedLease()
	f.g.Expect(fl.Status.Holder.PodName).To(Equal("a"))
	f.g.Expect(fl.Status.Holder.PodUID).To(Equal(f.a.UID))
	f.g.Expect(fl.Status.Fence).To(Equal(f.fence))

	// The operator writes it (as the controller does after every grant).
	touch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/status/conditions/-","value":{"type":"TestTouched","status":"True","reason":"Test","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}}]`))
	f.g.Expect(f.operator.Status().Patch(f.ctx, ref.DeepCopy(), touch)).To(Succeed())
}
