package fencedlease

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// dbFencedLease is FencedLease db in namespace n, selecting app=db, with
// its finalizer.
func dbFencedLease(takeover fencingv1alpha1.TakeoverPolicy) *fencingv1alpha1.FencedLease {
	return &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", Generation: 1, Finalizers: []string{fencingv1alpha1.Finalizer}},
		Spec: fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Takeover: takeover},
	}
}

// livePodLists counts the lists of pods that r makes on the API server.
func livePodLists(r *Reconciler, c client.Client) *int {
	n := new(int)
	r.APIReader = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			switch l := list.(type) {
			case *corev1.PodList:
				*n++
			case *metav1.PartialObjectMetadataList:
				if l.GetObjectKind().GroupVersionKind().Kind == "PodList" {
					*n++
				}
			}
			return cl.List(ctx, list, opts...)
		},
	})
	return n
}

// TestAFirstGrantIsPublishedWithoutAList: the first grant of a FencedLease
// is published by the reconcile that created its Lease with it, without
// listing the pods from the API server (a pass over every pod of the
// namespace there: half the API server's time in a cold start of 10,000
// FencedLeases). A takeover still lists them.
func TestAFirstGrantIsPublishedWithoutAList(t *testing.T) {
	key := types.NamespacedName{Namespace: "n", Name: "db"}
	fl := dbFencedLease(fencingv1alpha1.TakeoverImmediate)
	a, b := runningPod("a", time.Hour), runningPod("b", time.Minute)
	c, r := grantWorld(t, fl, a, b)
	lists := livePodLists(r, c)

	first := reconcileUntilCommitted(t, r, c, key, 0)
	if got := published(t, c, "a"); got != first {
		t.Fatalf("first grant: pod a carries holder fence %d, want %d", got, first)
	}
	if *lists != 0 {
		t.Fatalf("first grant: %d lists of pods on the API server, want none", *lists)
	}

	// The holder's containers stop being ready: b is granted, and the
	// publication lists the pods to mark every other one.
	containersNotReady(t, c, a)
	next := reconcileUntilCommitted(t, r, c, key, first)
	if got := published(t, c, "b"); got != next {
		t.Fatalf("takeover: pod b carries holder fence %d, want %d", got, next)
	}
	if *lists == 0 {
		t.Fatal("takeover: no list of the pods before publishing the new holder")
	}
}

// TestAFirstGrantGoesTheUsualWayWhileAnotherPodIsPublished: a pod the cache
// shows published as the FencedLease's holder (left by a FencedLease of the
// same name whose finalizer was removed by hand), which the reconcile could
// not demote from the cache (the pod changed under the write), makes the
// first grant's publication list the pods and demote it first: never two
// pods published as holder. (The fake API numbers versions per object, so
// the new grant's fence is 1 as well; on a real API server it is higher.)
func TestAFirstGrantGoesTheUsualWayWhileAnotherPodIsPublished(t *testing.T) {
	ctx, key := t.Context(), types.NamespacedName{Namespace: "n", Name: "db"}
	fl := dbFencedLease("")
	a, left := runningPod("a", time.Hour), runningPod("left", time.Minute)
	left.Labels[fencingv1alpha1.LabelLease] = "db"
	left.Annotations = map[string]string{fencingv1alpha1.AnnotationLease: "db", fencingv1alpha1.AnnotationRole: holder.RoleHolder,
		fencingv1alpha1.AnnotationFence: "1", fencingv1alpha1.AnnotationGrant: "1"}
	left.Status.Conditions[0].Status = corev1.ConditionFalse // not eligible: a is granted
	c, r := grantWorld(t, fl, a, left)
	lists := livePodLists(r, c)
	conflicted := false
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if obj.GetName() == "left" && !conflicted {
				conflicted = true
				return apierrors.NewConflict(corev1.Resource("pods"), "left", errors.New("the kubelet wrote it"))
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})

	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if !conflicted {
		t.Fatal("the reconcile did not try to demote pod left from its cache")
	}
	if a, left := published(t, c, "a"), published(t, c, "left"); a != 0 && left != 0 {
		t.Fatalf("pods a and left both published as holder (fences %d and %d)", a, left)
	}
	first := reconcileUntilCommitted(t, r, c, key, 0)
	if got := published(t, c, "a"); got != first {
		t.Fatalf("pod a carries holder fence %d, want %d", got, first)
	}
	if *lists == 0 {
		t.Fatal("the first grant was published without a list while the cache showed another pod published as holder")
	}
}

// TestDeletionClearsThePodsTheAPIServerLists: a FencedLease being deleted
// clears its label and annotations from every pod the API server lists with
// its label, also one its cache does not show yet (a FencedLease created
// again under the name publishes its first grant without a list of its
// own).
func TestDeletionClearsThePodsTheAPIServerLists(t *testing.T) {
	ctx, key := t.Context(), types.NamespacedName{Namespace: "n", Name: "db"}
	now := metav1.Now()
	fl := dbFencedLease("")
	fl.DeletionTimestamp = &now
	pod := runningPod("p", time.Hour)
	pod.Labels[fencingv1alpha1.LabelLease] = "db"
	pod.Annotations = map[string]string{fencingv1alpha1.AnnotationLease: "db", fencingv1alpha1.AnnotationRole: holder.RoleHolder,
		fencingv1alpha1.AnnotationFence: "7", fencingv1alpha1.AnnotationGrant: "7"}
	c, r := grantWorld(t, fl, pod)
	// The cache has not seen the pod labelled yet.
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				return nil
			}
			return cl.List(ctx, list, opts...)
		},
	})
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if p := publicationOf(got, "db"); !p.Bare() {
		t.Fatalf("pod p after FencedLease db was deleted: %+v, want nothing of db left", p)
	}
}

// TestTheReconcileAfterAGrantTrustsItsOwnPublication: the reconcile that
// follows a grant, a millisecond after the one that published it, reads
// the holder from a pod cache that has not seen the publication yet. It
// knows the pod is published (this process wrote it, at a later version
// than the cache shows) and does not publish again the usual way, whose
// list of the namespace's pods on the API server would only find it done.
// A pod that changed after the publication is looked at as usual.
func TestTheReconcileAfterAGrantTrustsItsOwnPublication(t *testing.T) {
	ctx, key := t.Context(), types.NamespacedName{Namespace: "n", Name: "db"}
	a, b := runningPod("a", time.Hour), runningPod("b", time.Minute)
	c, r := grantWorld(t, dbFencedLease(""), a, b)
	lists := livePodLists(r, c)
	fence := reconcileUntilCommitted(t, r, c, key, 0)
	if got := published(t, c, "a"); got != fence || *lists != 0 {
		t.Fatalf("first grant: pod a published with fence %d after %d lists, want %d and none", got, *lists, fence)
	}

	// The cache shows pod a as it was just before its publication:
	// labelled, not yet published, one version older.
	stored := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(a), stored); err != nil {
		t.Fatal(err)
	}
	stale := stored.DeepCopy()
	for _, k := range record.PodAnnotations {
		delete(stale.Annotations, k)
	}
	rv, err := strconv.Atoi(stored.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	stale.ResourceVersion = strconv.Itoa(rv - 1)
	lagging := func(of *corev1.Pod) {
		r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
			List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if err := cl.List(ctx, list, opts...); err != nil {
					return err
				}
				if pods, ok := list.(*corev1.PodList); ok {
					for i := range pods.Items {
						if pods.Items[i].UID == of.UID {
							pods.Items[i] = *of.DeepCopy()
						}
					}
				}
				return nil
			},
		})
	}
	lagging(stale)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if *lists != 0 {
		t.Fatalf("the reconcile after the grant listed the pods %d times: it published again a pod it had published", *lists)
	}
	if got := published(t, c, "a"); got != fence {
		t.Fatalf("pod a carries holder fence %d, want %d", got, fence)
	}

	// The pod's publication is cleared by hand after it: the cache, once it
	// shows that newer version, has the publication made again.
	stored.Annotations[fencingv1alpha1.AnnotationRole] = holder.RoleStandby
	if err := c.Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	lagging(stored)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if got := published(t, c, "a"); got != fence {
		t.Fatalf("pod a changed after its publication: holder fence %d, want %d published again", got, fence)
	}
}
