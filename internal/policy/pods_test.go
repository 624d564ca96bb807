package policy_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func (f *fixture) newPod(name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

// annotationsDenied is the policy's message for a change of the
// fencedlease.io/ annotations of a pod.
func annotationsDenied(ns, pod, user, keys string) string {
	return fmt.Sprintf(`pod %s/%s: annotations fencedlease.io/* are written by the fencedlease operator only: user %q may not set, change or remove %s`, ns, pod, user, keys)
}

func labelDenied(ns, pod, user string) string {
	return fmt.Sprintf(`pod %s/%s: label fencedlease.io/lease is written by the fencedlease operator only: user %q may not set, change or remove it`, ns, pod, user)
}

// TestPodStateAtCreate: nobody but the operator creates a pod that carries
// the token annotations or the lease label, not even as a copy of the
// holder's pod; pods without them are created as usual.
func TestPodStateAtCreate(t *testing.T) {
	f := newFixture(t)
	holder := &corev1.Pod{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "a"}, holder)).To(Succeed())
	for i, c := range f.callers() {
		t.Run(c.who, func(t *testing.T) {
			g := NewWithT(t)
			name := fmt.Sprintf("forged-%d", i)
			err := c.c.Create(f.ctx, f.newPod(name, appLabels, map[string]string{
				fencingv1alpha1.AnnotationRole: fencingv1alpha1.RoleHolder, fencingv1alpha1.AnnotationFence: fmt.Sprint(f.fence)}))
			expectDenied(g, err, fmt.Sprintf("pods %q", name), annotationsDenied(f.ns, name, c.user, "fencedlease.io/fence, fencedlease.io/role"))
			err = c.c.Create(f.ctx, f.newPod(name, map[string]string{"app": "singleton", labelLease: "db"}, nil))
			expectDenied(g, err, fmt.Sprintf("pods %q", name), labelDenied(f.ns, name, c.user))
			// A copy of the holder's pod, as kubectl get -o yaml would give it.
			cp := f.newPod(name, holder.Labels, holder.Annotations)
			cp.Spec = *holder.Spec.DeepCopy()
			err = c.c.Create(f.ctx, cp)
			expectDenied(g, err, fmt.Sprintf("pods %q", name), annotationsDenied(f.ns, name, c.user, "fencedlease.io/fence, fencedlease.io/grant, fencedlease.io/lease, fencedlease.io/role"))
			// The same as a dry run: the same answer.
			err = c.c.Create(f.ctx, cp.DeepCopy(), client.DryRunAll)
			expectDenied(g, err, fmt.Sprintf("pods %q", name), annotationsDenied(f.ns, name, c.user, "fencedlease.io/fence, fencedlease.io/grant, fencedlease.io/lease, fencedlease.io/role"))

			// Without them: created, with the user's own annotations and the
			// product's other labels.
			plain := f.newPod(name, map[string]string{"app": "singleton", fencingv1alpha1.LabelInject: "true"}, map[string]string{"example.com/note": "x"})
			g.Expect(c.c.Create(f.ctx, plain)).To(Succeed())
		})
	}
	f.g.Expect(f.published("a")).To(Equal([]string{fencingv1alpha1.RoleHolder, fmt.Sprint(f.fence), "db"}))
}

// TestPodStateAtUpdate: nobody but the operator sets, changes or removes the
// token annotations or the lease label of a pod, by update, merge patch,
// JSON patch, server-side apply or the status subresource; other changes to
// the same pods go through, and the operator's own do.
func TestPodStateAtUpdate(t *testing.T) {
	f := newFixture(t)
	fence := fmt.Sprint(f.fence)
	for _, c := range f.callers() {
		t.Run(c.who, func(t *testing.T) {
			g := NewWithT(t)
			// The standby makes itself the holder, with the current fence.
			merge := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"fencedlease.io/role":"holder","fencedlease.io/fence":%q}}}`, fence))
			expectDenied(g, c.c.Patch(f.ctx, f.newPod("b", nil, nil), merge), `pods "b"`,
				annotationsDenied(f.ns, "b", c.user, "fencedlease.io/fence, fencedlease.io/role"))
			expectDenied(g, c.c.Patch(f.ctx, f.newPod("b", nil, nil), merge, client.DryRunAll), `pods "b"`,
				annotationsDenied(f.ns, "b", c.user, "fencedlease.io/fence, fencedlease.io/role"))
			// The holder's token is taken away.
			jsonPatch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/annotations/fencedlease.io~1fence"}]`))
			expectDenied(g, c.c.Patch(f.ctx, f.newPod("a", nil, nil), jsonPatch), `pods "a"`,
				annotationsDenied(f.ns, "a", c.user, "fencedlease.io/fence"))
			// Server-side apply.
			ac := corev1ac.Pod("b", f.ns).WithAnnotations(map[string]string{fencingv1alpha1.AnnotationRole: fencingv1alpha1.RoleHolder})
			expectDenied(g, c.c.Apply(f.ctx, ac, client.FieldOwner("intruder"), client.ForceOwnership), `pods "b"`,
				annotationsDenied(f.ns, "b", c.user, "fencedlease.io/role"))
			// The lease label: the operator put it on every candidate; it can
			// be neither moved to another FencedLease nor removed.
			label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fencedlease.io/lease":"other"}}}`))
			expectDenied(g, c.c.Patch(f.ctx, f.newPod("b", nil, nil), label), `pods "b"`, labelDenied(f.ns, "b", c.user))
			unlabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fencedlease.io/lease":null}}}`))
			expectDenied(g, c.c.Patch(f.ctx, f.newPod("a", nil, nil), unlabel), `pods "a"`, labelDenied(f.ns, "a", c.user))
			// Other annotations and labels of the same pods are theirs.
			other := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/note":"x"},"labels":{"example.com/tier":"y"}}}`))
			g.Expect(c.c.Patch(f.ctx, f.newPod("b", nil, nil), other)).To(Succeed())
		})
	}
	// The status subresource keeps metadata changes too (the editor may not
	// write pods/status at all).
	for _, c := range []caller{f.standby, f.admin} {
		p := &corev1.Pod{}
		f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "b"}, p)).To(Succeed())
		p.Annotations[fencingv1alpha1.AnnotationRole] = fencingv1alpha1.RoleHolder
		expectDenied(f.g, c.c.Status().Update(f.ctx, p), `pods "b"`, annotationsDenied(f.ns, "b", c.user, "fencedlease.io/role"))
	}
	f.g.Expect(f.published("a")).To(Equal([]string{fencingv1alpha1.RoleHolder, fence, "db"}))
	f.g.Expect(f.published("b")).To(Equal([]string{fencingv1alpha1.RoleStandby, "", "db"}))

	// The operator writes them, by JSON patch and server-side apply, on a pod
	// no FencedLease selects. (Its controller clears such a pod soon after;
	// the writes are checked in the API server's answers.)
	other := f.newPod("other", map[string]string{"app": "other"}, nil)
	f.g.Expect(f.c.Create(f.ctx, other)).To(Succeed())
	patched := f.newPod("other", nil, nil)
	f.g.Expect(f.operator.Patch(f.ctx, patched, client.RawPatch(types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/metadata/annotations","value":{"fencedlease.io/role":"standby"}},{"op":"add","path":"/metadata/labels/fencedlease.io~1lease","value":"db"}]`)))).To(Succeed())
	f.g.Expect(patched.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationRole, fencingv1alpha1.RoleStandby))
	f.g.Expect(patched.Labels).To(HaveKeyWithValue(labelLease, "db"))
	applied := corev1ac.Pod("other", f.ns).WithAnnotations(map[string]string{fencingv1alpha1.AnnotationFence: ""})
	f.g.Expect(f.operator.Apply(f.ctx, applied, client.FieldOwner("fencedlease"))).To(Succeed())
	f.g.Expect(applied.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, ""))
}

// labelLease is the label the controller puts on the candidate pods it
// manages, operator-owned like the annotations.
const labelLease = "fencedlease.io/lease"
