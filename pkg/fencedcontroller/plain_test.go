package fencedcontroller_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
)

// bare is an object as a partial write names it: no labels.
func bare(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// TestClientWritesUnprotectedObjectsAsTheyAre: a write of an object that
// the caller gives without the protected-by label reaches the wrapped
// client as a plain client sends it: no fence annotation, the caller's
// field manager; a delete is one delete, with no write before it.
func TestClientWritesUnprotectedObjectsAsTheyAre(t *testing.T) {
	for _, w := range []write{
		{"create", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, bare("new"))
		}, sent{verb: "create"}, nil},
		{"update", func(ctx context.Context, c client.Client) error {
			obj := bare("plain")
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			obj.Data["k"] = "w"
			return c.Update(ctx, obj)
		}, sent{verb: "update"}, nil},
		{"merge patch", func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, bare("plain"), client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"w"}}`)))
		}, sent{verb: "patch"}, nil},
		{"apply", func(ctx context.Context, c client.Client) error {
			return c.Apply(ctx, corev1ac.ConfigMap("plain", ns).WithData(map[string]string{"n": "w"}), client.FieldOwner("widget-controller"))
		}, sent{verb: "apply", fieldManager: "widget-controller"}, nil},
		{"status update", func(ctx context.Context, c client.Client) error {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			obj.Labels = nil
			obj.Status.ObservedGeneration = 3
			return c.Status().Update(ctx, obj)
		}, sent{verb: "update", subResource: "status"}, nil},
		{"status apply with the caller's field manager", func(ctx context.Context, c client.Client) error {
			return c.Status().Apply(ctx, appsv1ac.Deployment("app", ns).WithStatus(appsv1ac.DeploymentStatus().WithObservedGeneration(5)),
				client.FieldOwner("status-writer"))
		}, sent{verb: "apply", subResource: "status", fieldManager: "status-writer"}, nil},
		{"delete", func(ctx context.Context, c client.Client) error {
			return c.Delete(ctx, bare("plain"))
		}, sent{verb: "delete"}, nil},
	} {
		t.Run(w.name, func(t *testing.T) {
			g := NewWithT(t)
			c, _, rec := newClients(t, true)
			rec.sent = nil
			g.Expect(w.do(context.Background(), c)).To(Succeed())
			g.Expect(rec.sent).To(Equal([]sent{w.want}))
		})
	}
}

// missingFence is the fencing webhook's denial of a write of a protected
// object without a fence, as the API server returns it.
func missingFence(name string) error {
	return webhookDenial(fmt.Sprintf(`ConfigMap %s/%s: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "widgets" may write this object, with its fence`, ns, name))
}

func webhookDenial(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden,
		Reason: metav1.StatusReasonForbidden, Message: `admission webhook "protected.fencedlease.io" denied the request: ` + msg}}
}

// fencingWebhook stands in for the fencing webhook in front of a fake
// client: it refuses every write of the ConfigMap "state" and of the
// Deployment "app" that carries no fence (in the annotation, or in a
// subresource write's field manager) with deny, and records what came.
func fencingWebhook(rec *recorder, deny func(name string) error) interceptor.Funcs {
	f := rec.funcs()
	guarded := func(obj client.Object) bool { return obj.GetName() == "state" || obj.GetName() == "app" }
	patch, apply, subPatch := f.Patch, f.Apply, f.SubResourcePatch
	f.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if guarded(obj) && patchAnnotation(p, obj) == "" {
			rec.sent = append(rec.sent, sent{verb: "patch"})
			return deny(obj.GetName())
		}
		return patch(ctx, c, obj, p, opts...)
	}
	f.Apply = func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
		if annotationOf(obj) == "" {
			rec.sent = append(rec.sent, sent{verb: "apply", fieldManager: (&client.ApplyOptions{}).ApplyOptions(opts).FieldManager})
			return deny("state")
		}
		return apply(ctx, c, obj, opts...)
	}
	f.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		fm := (&client.SubResourcePatchOptions{}).ApplyOptions(opts).FieldManager
		if guarded(obj) && !strings.Contains(fm, fencedcontroller.FieldManagerFence) {
			rec.sent = append(rec.sent, sent{verb: "patch", subResource: sub, fieldManager: fm})
			return deny(obj.GetName())
		}
		return subPatch(ctx, c, sub, obj, p, opts...)
	}
	return f
}

func guardedClients(t *testing.T, deny func(name string) error) (client.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	inner := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).
		WithStatusSubresource(&appsv1.Deployment{}).WithInterceptorFuncs(fencingWebhook(rec, deny)).Build()
	g := &grants{g: fence.Grant{Lease: "widgets", Fence: 42}, held: true}
	return fencedcontroller.NewClient(inner, g, fencedcontroller.ClientOptions{FieldManager: "widget-controller"}), rec
}

// TestClientStampsAWriteRefusedForItsMissingFence: a write of a protected
// object that the caller gave without the label (a partial patch, an
// apply configuration without it) goes out plain; refused by the fencing
// webhook for its missing fence, it is sent once more, stamped.
func TestClientStampsAWriteRefusedForItsMissingFence(t *testing.T) {
	for _, w := range []write{
		{"merge patch", func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, bare("state"), client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"w"}}`)))
		}, sent{verb: "patch", annotation: "42"}, &sent{verb: "patch"}},
		{"apply", func(ctx context.Context, c client.Client) error {
			return c.Apply(ctx, corev1ac.ConfigMap("state", ns).WithData(map[string]string{"n": "w"}), client.FieldOwner("widget-controller"))
		}, sent{verb: "apply", annotation: "42", fieldManager: "widget-controller"}, &sent{verb: "apply", fieldManager: "widget-controller"}},
		{"status patch", func(ctx context.Context, c client.Client) error {
			return c.Status().Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
				client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":7}}`)))
		}, sent{verb: "patch", subResource: "status", fieldManager: "widget-controller;fencedlease.io/fence=42"}, &sent{verb: "patch", subResource: "status"}},
	} {
		t.Run(w.name, func(t *testing.T) {
			g := NewWithT(t)
			c, rec := guardedClients(t, missingFence)
			g.Expect(w.do(context.Background(), c)).To(Succeed())
			g.Expect(rec.sent).To(Equal([]sent{*w.first, w.want}))
		})
	}
}

// TestClientRetriesNothingElse: any other denial of a plain write is the
// answer (here: the FencedLease is at a newer grant than the client's),
// sent once, returned as it is.
func TestClientRetriesNothingElse(t *testing.T) {
	g := NewWithT(t)
	stale := func(name string) error {
		return webhookDenial(fmt.Sprintf(`ConfigMap %s/%s: write with fence 41 rejected: stale holder: FencedLease "widgets" is at fence 43`, ns, name))
	}
	c, rec := guardedClients(t, stale)
	err := c.Patch(context.Background(), bare("state"), client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"w"}}`)))
	g.Expect(err).To(MatchError(ContainSubstring("stale holder")))
	g.Expect(rec.sent).To(Equal([]sent{{verb: "patch"}}))
}

// TestDeleteOfAnObjectNotLastWrittenWithTheFence: a plain delete of an
// object given without the label that the fencing webhook refuses because
// the object does not carry the current fence is made again the protected
// way: the fence written on it, then that version deleted.
func TestDeleteOfAnObjectNotLastWrittenWithTheFence(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	f := rec.funcs()
	del := f.Delete
	f.Delete = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if (&client.DeleteOptions{}).ApplyOptions(opts).Preconditions == nil {
			rec.sent = append(rec.sent, sent{verb: "delete"})
			return webhookDenial(fmt.Sprintf(`ConfigMap %s/%s: delete rejected: the object was last written with fence 41, not with the current fence 42 of FencedLease "widgets": the holder deletes only what carries its current fence (write fencedlease.io/fence=42 on it first, then delete that version)`, ns, obj.GetName()))
		}
		return del(ctx, c, obj, opts...)
	}
	inner := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).WithInterceptorFuncs(f).Build()
	c := fencedcontroller.NewClient(inner, &grants{g: fence.Grant{Lease: "widgets", Fence: 42}, held: true}, fencedcontroller.ClientOptions{FieldManager: "widget-controller"})
	g.Expect(c.Delete(context.Background(), bare("state"))).To(Succeed())
	g.Expect(rec.sent).To(Equal([]sent{{verb: "delete"}, {verb: "patch", annotation: "42"}, {verb: "delete"}}))
	g.Expect(apierrors.IsNotFound(inner.Get(context.Background(), client.ObjectKeyFromObject(bare("state")), &corev1.ConfigMap{}))).To(BeTrue())
}

// TestClientStampsAWriteRefusedForTheFenceItCarriedOver: a plain write of
// a protected object carries the fence stored on it, an older grant's:
// refused as stale while the FencedLease is at this client's fence, it is
// sent once more, stamped.
func TestClientStampsAWriteRefusedForTheFenceItCarriedOver(t *testing.T) {
	g := NewWithT(t)
	carried := func(name string) error {
		return webhookDenial(fmt.Sprintf(`ConfigMap %s/%s: write with fence 41 rejected: stale holder: FencedLease "widgets" is at fence 42`, ns, name))
	}
	c, rec := guardedClients(t, carried)
	g.Expect(c.Patch(context.Background(), bare("state"), client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"w"}}`)))).To(Succeed())
	g.Expect(rec.sent).To(Equal([]sent{{verb: "patch"}, {verb: "patch", annotation: "42"}}))
}
