package fencedcontroller_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
)

// grants is a Grants that holds g while held is true.
type grants struct {
	g    fence.Grant
	held bool
}

func (s *grants) Current() (fence.Grant, bool) { return s.g, s.held }

// sent is one write as the wrapped client received it: what it carried.
type sent struct {
	verb        string // create, update, patch, apply, delete, deleteallof
	subResource string
	// annotation is the fence annotation of the object, or of the patch
	// (for a JSON patch, the value its operations add); "" when absent.
	annotation   string
	fieldManager string
}

// recorder records every write a fake client receives, then lets the fake
// client make it, so that the tests see the stored result too.
type recorder struct{ sent []sent }

func annotationOf(obj any) string {
	data, err := json.Marshal(obj)
	if err != nil {
		return "marshal: " + err.Error()
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return "unmarshal: " + err.Error()
	}
	return u.GetAnnotations()[fence.Annotation]
}

func patchAnnotation(p client.Patch, obj client.Object) string {
	data, err := p.Data(obj)
	if err != nil {
		return "data: " + err.Error()
	}
	if p.Type() == types.JSONPatchType {
		var ops []map[string]any
		_ = json.Unmarshal(data, &ops)
		for _, op := range ops {
			if op["path"] == "/metadata/annotations/fencedlease.io~1fence" && op["op"] == "add" {
				return op["value"].(string)
			}
		}
		return ""
	}
	var doc struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(data, &doc)
	return doc.Metadata.Annotations[fence.Annotation]
}

func (r *recorder) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			r.sent = append(r.sent, sent{verb: "create", annotation: obj.GetAnnotations()[fence.Annotation],
				fieldManager: (&client.CreateOptions{}).ApplyOptions(opts).FieldManager})
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			r.sent = append(r.sent, sent{verb: "update", annotation: obj.GetAnnotations()[fence.Annotation],
				fieldManager: (&client.UpdateOptions{}).ApplyOptions(opts).FieldManager})
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			r.sent = append(r.sent, sent{verb: "patch", annotation: patchAnnotation(p, obj),
				fieldManager: (&client.PatchOptions{}).ApplyOptions(opts).FieldManager})
			return c.Patch(ctx, obj, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			r.sent = append(r.sent, sent{verb: "apply", annotation: annotationOf(obj),
				fieldManager: (&client.ApplyOptions{}).ApplyOptions(opts).FieldManager})
			return c.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			r.sent = append(r.sent, sent{verb: "delete"})
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			r.sent = append(r.sent, sent{verb: "deleteallof"})
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			r.sent = append(r.sent, sent{verb: "create", subResource: sub,
				fieldManager: (&client.SubResourceCreateOptions{}).ApplyOptions(opts).FieldManager})
			return nil // the fake client knows no subresource to create on a Deployment
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			r.sent = append(r.sent, sent{verb: "update", subResource: sub,
				fieldManager: (&client.SubResourceUpdateOptions{}).ApplyOptions(opts).FieldManager})
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			r.sent = append(r.sent, sent{verb: "patch", subResource: sub,
				fieldManager: (&client.SubResourcePatchOptions{}).ApplyOptions(opts).FieldManager})
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			r.sent = append(r.sent, sent{verb: "apply", subResource: sub,
				fieldManager: (&client.SubResourceApplyOptions{}).ApplyOpts(opts).FieldManager})
			return nil
		},
	}
}

const ns = "team-a"

// protectedBy is the label of the objects that FencedLease widgets
// protects.
var protectedBy = map[string]string{fencedcontroller.LabelProtectedBy: "widgets"}

func objects() []client.Object {
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "state", Labels: protectedBy,
			Annotations: map[string]string{fence.Annotation: "42", "keep": "me"}}, Data: map[string]string{"k": "v"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy,
			Annotations: map[string]string{fence.Annotation: "41"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Data: map[string]string{"k": "v"}},
	}
}

func newClients(t *testing.T, held bool) (client.Client, client.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	inner := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).
		WithStatusSubresource(&appsv1.Deployment{}).WithInterceptorFuncs(rec.funcs()).Build()
	g := &grants{g: fence.Grant{Lease: "widgets", Fence: 42}, held: held}
	return fencedcontroller.NewClient(inner, g, fencedcontroller.ClientOptions{FieldManager: "widget-controller"}), inner, rec
}

// cm is a protected ConfigMap as a caller gives it: labelled.
func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: protectedBy}}
}

// write is one write through the fencing client.
type write struct {
	name string
	do   func(ctx context.Context, c client.Client) error
	want sent
	// first is what the client sends before the write itself, if anything.
	first *sent
}

// writes are every kind of write, each with what the wrapped client must
// receive when the grant with fence 42 is held.
func writes() []write {
	const fm = "widget-controller;fencedlease.io/fence=42"
	get := func(ctx context.Context, c client.Client, obj client.Object) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			panic(err)
		}
	}
	return []write{
		{"create", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, cm("new"))
		}, sent{verb: "create", annotation: "42"}, nil},
		{"update", func(ctx context.Context, c client.Client) error {
			obj := cm("state")
			get(ctx, c, obj)
			obj.Data["k"] = "w"
			return c.Update(ctx, obj)
		}, sent{verb: "update", annotation: "42"}, nil},
		{"merge patch that does not change the annotation", func(ctx context.Context, c client.Client) error {
			obj := cm("state")
			get(ctx, c, obj)
			orig := obj.DeepCopy()
			obj.Data["k"] = "w"
			return c.Patch(ctx, obj, client.MergeFrom(orig))
		}, sent{verb: "patch", annotation: "42"}, nil},
		{"merge patch with an optimistic lock", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}
			get(ctx, c, obj)
			orig := obj.DeepCopy()
			obj.Spec.Paused = true
			return c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		}, sent{verb: "patch", annotation: "42"}, nil},
		{"strategic merge patch", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}
			get(ctx, c, obj)
			orig := obj.DeepCopy()
			obj.Spec.MinReadySeconds = 5
			return c.Patch(ctx, obj, client.StrategicMergeFrom(orig))
		}, sent{verb: "patch", annotation: "42"}, nil},
		{"JSON patch", func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, cm("state"), client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/k","value":"w"}]`)))
		}, sent{verb: "patch", annotation: "42"}, nil},
		{"apply patch", func(ctx context.Context, c client.Client) error {
			obj := cm("applied")
			obj.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
			return c.Patch(ctx, obj, client.Apply, client.FieldOwner("widget-controller")) //nolint:staticcheck // the deprecated apply patch is a write like any other
		}, sent{verb: "patch", annotation: "42", fieldManager: "widget-controller"}, nil},
		{"apply of a typed configuration", func(ctx context.Context, c client.Client) error {
			return c.Apply(ctx, corev1ac.ConfigMap("applied", ns).WithLabels(protectedBy).WithData(map[string]string{"k": "v"}), client.FieldOwner("widget-controller"))
		}, sent{verb: "apply", annotation: "42", fieldManager: "widget-controller"}, nil},
		{"apply of an unstructured configuration", func(ctx context.Context, c client.Client) error {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			u.SetNamespace(ns)
			u.SetName("applied")
			u.SetLabels(protectedBy)
			return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("widget-controller"))
		}, sent{verb: "apply", annotation: "42", fieldManager: "widget-controller"}, nil},
		{"delete", func(ctx context.Context, c client.Client) error {
			return c.Delete(ctx, cm("state"))
		}, sent{verb: "delete"}, &sent{verb: "patch", annotation: "42"}},
		{"delete all of", func(ctx context.Context, c client.Client) error {
			return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))
		}, sent{verb: "deleteallof"}, nil},
		{"status update", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}
			get(ctx, c, obj)
			obj.Status.ObservedGeneration = 3
			return c.Status().Update(ctx, obj)
		}, sent{verb: "update", subResource: "status", fieldManager: fm}, nil},
		{"status patch with the caller's own field manager", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}
			get(ctx, c, obj)
			orig := obj.DeepCopy()
			obj.Status.ObservedGeneration = 4
			return c.Status().Patch(ctx, obj, client.MergeFrom(orig), client.FieldOwner("status-writer"))
		}, sent{verb: "patch", subResource: "status", fieldManager: "status-writer;fencedlease.io/fence=42"}, nil},
		{"status apply", func(ctx context.Context, c client.Client) error {
			return c.Status().Apply(ctx, appsv1ac.Deployment("app", ns).WithLabels(protectedBy).WithStatus(appsv1ac.DeploymentStatus().WithObservedGeneration(5)),
				client.FieldOwner("widget-controller"))
		}, sent{verb: "apply", subResource: "status", fieldManager: fm}, nil},
		{"status create", func(ctx context.Context, c client.Client) error {
			return c.Status().Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}, &appsv1.Deployment{})
		}, sent{verb: "create", subResource: "status", fieldManager: fm}, nil},
		{"scale update", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}
			return c.SubResource("scale").Update(ctx, obj,
				client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}))
		}, sent{verb: "update", subResource: "scale", fieldManager: fm}, nil},
		{"scale patch", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: protectedBy}}
			return c.SubResource("scale").Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`)))
		}, sent{verb: "patch", subResource: "scale", fieldManager: fm}, nil},
	}
}

// TestClientStampsEveryWrite: with a grant held, every write reaches the
// wrapped client once, carrying the fence where the webhook looks for it.
func TestClientStampsEveryWrite(t *testing.T) {
	for _, w := range writes() {
		t.Run(w.name, func(t *testing.T) {
			g := NewWithT(t)
			c, _, rec := newClients(t, true)
			rec.sent = nil
			err := w.do(context.Background(), c)
			g.Expect(err).NotTo(HaveOccurred())
			want := []sent{w.want}
			if w.first != nil {
				want = []sent{*w.first, w.want}
			}
			g.Expect(rec.sent).To(Equal(want))
		})
	}
}

// TestClientRefusesWithoutGrant: without a grant nothing is sent, and the
// error says why and names the object.
func TestClientRefusesWithoutGrant(t *testing.T) {
	for _, w := range writes() {
		t.Run(w.name, func(t *testing.T) {
			g := NewWithT(t)
			c, _, rec := newClients(t, false)
			err := w.do(context.Background(), c)
			g.Expect(err).To(HaveOccurred())
			g.Expect(errors.Is(err, fence.ErrNotHolder)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(MatchRegexp(`^(create|update|patch|apply|delete|delete all of) (status of |scale of )?(ConfigMap|Deployment) (team-a/(state|new|applied|app)|in namespace team-a) refused before it was sent: not the holder: this process holds no grant$`))
			g.Expect(rec.sent).To(BeEmpty())
		})
	}
}

// TestApplyDecodesTheAnswer: a typed apply configuration sent as its
// unstructured equivalent gets the API server's answer, as with the plain
// client, and the stored object carries the fence.
func TestApplyDecodesTheAnswer(t *testing.T) {
	g := NewWithT(t)
	c, inner, _ := newClients(t, true)
	ac := corev1ac.ConfigMap("applied", ns).WithLabels(protectedBy).WithData(map[string]string{"k": "v"})
	g.Expect(c.Apply(context.Background(), ac, client.FieldOwner("widget-controller"))).To(Succeed())
	g.Expect(ac.ResourceVersion).NotTo(BeNil(), "the answer was decoded into the configuration")
	g.Expect(ac.Annotations).To(HaveKeyWithValue(fence.Annotation, "42"))
	stored := cm("applied")
	g.Expect(inner.Get(context.Background(), client.ObjectKeyFromObject(stored), stored)).To(Succeed())
	g.Expect(stored.Annotations).To(HaveKeyWithValue(fence.Annotation, "42"))
	g.Expect(stored.Data).To(Equal(map[string]string{"k": "v"}))
}

// TestDeleteWritesTheFenceOnTheVersionItDeletes: Delete writes the fence on
// the object, then deletes the version that write made; a caller's
// precondition on an older version fails the fence write, and nothing is
// deleted.
func TestDeleteWritesTheFenceOnTheVersionItDeletes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, inner, _ := newClients(t, true)
	obj := cm("state")
	g.Expect(inner.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	old := obj.ResourceVersion
	obj.Data = map[string]string{"k": "changed"}
	g.Expect(inner.Update(ctx, obj)).To(Succeed())

	err := c.Delete(ctx, cm("state"), client.Preconditions{ResourceVersion: &old})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "a delete on an older version: %v", err)
	g.Expect(inner.Get(ctx, client.ObjectKeyFromObject(obj), &corev1.ConfigMap{})).To(Succeed(), "deleted although its precondition failed")

	g.Expect(c.Delete(ctx, cm("state"), client.Preconditions{ResourceVersion: &obj.ResourceVersion})).To(Succeed())
	g.Expect(apierrors.IsNotFound(inner.Get(ctx, client.ObjectKeyFromObject(obj), &corev1.ConfigMap{}))).To(BeTrue())
}

// TestDeleteKeepsTheCallersUIDPrecondition: a delete with a UID
// precondition keeps it, on the stamping patch and on the delete itself,
// next to the resourceVersion the patch made.
func TestDeleteKeepsTheCallersUIDPrecondition(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	var patches [][]byte
	var deletes []*client.DeleteOptions
	inner := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			g.Expect(err).NotTo(HaveOccurred())
			patches = append(patches, data)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes = append(deletes, (&client.DeleteOptions{}).ApplyOptions(opts))
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	c := fencedcontroller.NewClient(inner, &grants{g: fence.Grant{Lease: "widgets", Fence: 42}, held: true}, fencedcontroller.ClientOptions{FieldManager: "widget-controller"})
	uid := types.UID("uid-of-state")
	g.Expect(c.Delete(ctx, cm("state"), client.Preconditions{UID: &uid})).To(Succeed())
	g.Expect(patches).To(HaveLen(1))
	var sentPatch struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	g.Expect(json.Unmarshal(patches[0], &sentPatch)).To(Succeed())
	g.Expect(sentPatch.Metadata.UID).To(Equal(string(uid)), "the stamping patch %s", patches[0])
	g.Expect(deletes).To(HaveLen(1))
	pre := deletes[0].Preconditions
	g.Expect(pre).NotTo(BeNil())
	g.Expect(pre.UID).NotTo(BeNil(), "the delete dropped the caller's UID precondition")
	g.Expect(*pre.UID).To(Equal(uid))
	g.Expect(pre.ResourceVersion).NotTo(BeNil(), "the delete is not on the version the patch made")
}

// TestDeleteReportsAConflictOnlyForAnotherUID: the stamping patch refused
// because the name stands for another object (its UID is not the one in
// the precondition) is a conflict, as the API server answers such a
// delete; refused as invalid for any other reason (a policy, a webhook) it
// stays invalid, so that a caller retrying conflicts does not loop on it.
func TestDeleteReportsAConflictOnlyForAnotherUID(t *testing.T) {
	gk := schema.GroupKind{Kind: "ConfigMap"}
	for _, tc := range []struct {
		name       string
		refusal    error
		isConflict bool
	}{
		{"another object", apierrors.NewInvalid(gk, "state", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u2", "field is immutable")}), true},
		{"a policy", apierrors.NewInvalid(gk, "state", field.ErrorList{field.Invalid(field.NewPath("data"), "x", "denied by a policy")}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			deleted := false
			inner := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return tc.refusal
				},
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					deleted = true
					return c.Delete(ctx, obj, opts...)
				},
			}).Build()
			c := fencedcontroller.NewClient(inner, &grants{g: fence.Grant{Lease: "widgets", Fence: 42}, held: true}, fencedcontroller.ClientOptions{FieldManager: "widget-controller"})
			uid := types.UID("uid-of-state")
			err := c.Delete(context.Background(), cm("state"), client.Preconditions{UID: &uid})
			g.Expect(err).To(HaveOccurred())
			g.Expect(deleted).To(BeFalse(), "deleted after the stamping patch was refused")
			g.Expect(apierrors.IsConflict(err)).To(Equal(tc.isConflict), "%v", err)
			g.Expect(apierrors.IsInvalid(err)).To(Equal(!tc.isConflict), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.refusal.Error()))
		})
	}
}
