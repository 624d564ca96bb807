package testenv

import (
	"context"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fencedlease/fencedlease/test/harness"
)

// TestARetriedCreateTellsItsObjectFromAnOlderOne: a create whose first
// attempt meets a transient error is sent again. When the retry finds the
// object there, the first attempt was applied, and the create succeeds
// with the object; but an object of the name that is being deleted is an
// older one, and the create answers AlreadyExists. Taken for the created
// object, it let a harness re-creating an object stop while nothing would
// exist once the older one was gone.
func TestARetriedCreateTellsItsObjectFromAnOlderOne(t *testing.T) {
	harness.Needs(t, harness.ControlPlane)
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "retry-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name}}
	}

	// The first attempt is applied, and its reply lost.
	applied := RetryTransient(failFirstCreate(env.Client, true))
	created := cm("applied")
	if err := applied.Create(ctx, created); err != nil || created.UID == "" {
		t.Fatalf("a create applied on its first attempt: %v, uid %q; want success with the object", err, created.UID)
	}

	// An older object of the name is being deleted, held by a finalizer;
	// the first attempt never reaches the API server.
	old := cm("deleting")
	old.Finalizers = []string{"example.com/hold"}
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), old, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})
	lost := RetryTransient(failFirstCreate(env.Client, false))
	if err := lost.Create(ctx, cm("deleting")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("a create whose retry found an older object being deleted: %v, want AlreadyExists", err)
	}
}

// failFirstCreate is c with its first create failing on a reset
// connection, after the request was applied or before it was sent.
func failFirstCreate(c client.Client, applied bool) client.Client {
	failed := false
	return Intercept(c, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if failed {
				return cl.Create(ctx, obj, opts...)
			}
			failed = true
			if applied {
				if err := cl.Create(ctx, obj.DeepCopyObject().(client.Object), opts...); err != nil {
					return err
				}
			}
			return syscall.ECONNRESET
		},
	})
}
