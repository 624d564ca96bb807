package fencedlease

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// TestAGrantIsPublishedByTheReconcileThatCommitsIt: the reconcile that
// commits a grant records it in the status and then publishes it to the
// holder pod, a first grant and an Immediate takeover alike. Publishing on
// the next reconcile instead cost a takeover a trip through the workqueue
// and a wait for the caches to show the status and the Lease just written.
func TestAGrantIsPublishedByTheReconcileThatCommitsIt(t *testing.T) {
	key := types.NamespacedName{Namespace: "n", Name: "db"}
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", Generation: 1, Finalizers: []string{fencingv1alpha1.Finalizer}},
		Spec: fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Takeover: fencingv1alpha1.TakeoverImmediate},
	}
	a, b := runningPod("a", time.Hour), runningPod("b", time.Minute)
	c, r := grantWorld(t, fl, a, b)

	// The first grant: reconcile until the Lease holds a committed grant,
	// then its holder must be published already.
	first := reconcileUntilCommitted(t, r, c, key, 0)
	if got := published(t, c, "a"); got != first {
		t.Fatalf("first grant: pod a carries holder fence %d after the reconcile that committed fence %d", got, first)
	}

	// The holder's containers stop being ready: one reconcile grants b and
	// publishes it.
	containersNotReady(t, c, a)
	next := reconcileUntilCommitted(t, r, c, key, first)
	if next <= first {
		t.Fatalf("takeover: fence %d, want more than %d", next, first)
	}
	if got := published(t, c, "b"); got != next {
		t.Fatalf("takeover: pod b carries holder fence %d after the reconcile that committed fence %d", got, next)
	}
	if got := published(t, c, "a"); got != 0 {
		t.Fatalf("takeover: pod a still carries holder fence %d", got)
	}
}

// TestAFirstGrantCreatesTheLeaseGranted: the first grant of a FencedLease
// creates its Lease already granted, and commits it: two Lease writes, not
// an empty Lease first and the grant on it. A FencedLease with nobody to
// grant still gets its Lease, empty.
func TestAFirstGrantCreatesTheLeaseGranted(t *testing.T) {
	ctx, key := context.Background(), types.NamespacedName{Namespace: "n", Name: "db"}
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", Generation: 1, Finalizers: []string{fencingv1alpha1.Finalizer}},
		Spec:       fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	c, r := grantWorld(t, fl)
	var creates, updates int
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				creates++
			}
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				updates++
			}
			return cl.Update(ctx, obj, opts...)
		},
	})

	// Nobody to grant: the Lease is created, with no grant.
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, l); err != nil {
		t.Fatalf("no candidate: %v, want the Lease created empty", err)
	}
	if v := holder.LeaseOf(l); v.State != "" || l.Spec.HolderIdentity != nil || creates != 1 || updates != 0 {
		t.Fatalf("no candidate: Lease state %q holder %v after %d creates, %d updates; want an empty Lease, one create", v.State, l.Spec.HolderIdentity, creates, updates)
	}

	// A FencedLease of another name with a candidate: its Lease is created
	// granted, then committed.
	creates = 0
	fl2 := fl.DeepCopy()
	fl2.Name, fl2.ResourceVersion, fl2.Spec.Selector.MatchLabels = "web", "", map[string]string{"app": "web"}
	pod := runningPod("w", time.Hour)
	pod.Labels["app"] = "web"
	for _, obj := range []client.Object{fl2, pod} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	fence := reconcileUntilCommitted(t, r, c, types.NamespacedName{Namespace: "n", Name: "web"}, 0)
	if creates != 1 || updates != 1 {
		t.Errorf("first grant (fence %d): %d Lease creates and %d updates, want 1 and 1 (created granted, committed)", fence, creates, updates)
	}
}

// grantWorld is a fake API with the FencedLease, its pods, and the node
// they run on, and a Reconciler on it with room to grant.
func grantWorld(t *testing.T, fl *fencingv1alpha1.FencedLease, pods ...*corev1.Pod) (client.Client, *Reconciler) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	objs := []client.Object{fl, node}
	for _, p := range pods {
		objs = append(objs, p)
	}
	c := fakeAPI(t, objs...)
	r := &Reconciler{Client: c, APIReader: c, Clock: clock.RealClock{}}
	r.once.Do(r.defaults)
	r.pace.pace = idlePace()
	return c, r
}

// fakeAPI is a fake client holding objs, with the status subresources and
// the controller's cache indexes.
func fakeAPI(t *testing.T, objs ...client.Object) client.Client {
	builder := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&fencingv1alpha1.FencedLease{}, &corev1.Pod{})
	for _, ix := range Indexes() {
		builder = builder.WithIndex(ix.Object, ix.Field, ix.Extract)
	}
	return builder.Build()
}

// reconcileUntilCommitted reconciles until the Lease holds a committed
// grant with a fence above after, and returns that fence.
func reconcileUntilCommitted(t *testing.T, r *Reconciler, c client.Client, key types.NamespacedName, after int64) int64 {
	t.Helper()
	for range 10 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		l := &coordinationv1.Lease{}
		if err := c.Get(context.Background(), key, l); err == nil {
			if v := holder.LeaseOf(l); v.State == holder.StateHeld && v.Fence > after {
				return v.Fence
			}
		}
	}
	t.Fatalf("no grant above fence %d committed after 10 reconciles", after)
	return 0
}

// containersNotReady makes the containers of the pod not ready.
func containersNotReady(t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	if err := c.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// published is the fence a pod is published as holder with, or 0.
func published(t *testing.T, c client.Client, name string) int64 {
	t.Helper()
	pod := &corev1.Pod{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "n", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	if p := publicationOf(pod, "db"); p.IsHolder() {
		return p.Fence
	}
	return 0
}

// runningPod is a selected pod of FencedLease db on node "node", Running
// with containers ready for readyFor.
func runningPod(name string, readyFor time.Duration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now().Add(-readyFor))}}},
	}
}

// TestDemotingLeavesAPodOfAnotherFencedLeaseAlone: the grant of FencedLease
// other ends, and its old holder has since become the published holder of
// FencedLease db. Demoting it for other must not clear db's publication
// (the simulation found a replica that did: the pod lost fence 240 of db,
// and db's next pass published it again).
func TestDemotingLeavesAPodOfAnotherFencedLeaseAlone(t *testing.T) {
	pod := runningPod("p8", time.Hour)
	pod.Labels[fencingv1alpha1.LabelLease] = "db"
	pod.Annotations = map[string]string{fencingv1alpha1.AnnotationLease: "db", fencingv1alpha1.AnnotationRole: holder.RoleHolder,
		fencingv1alpha1.AnnotationFence: "240", fencingv1alpha1.AnnotationGrant: "240"}
	other := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "other"}}
	c, r := grantWorld(t, other, pod)
	cached := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), cached); err != nil {
		t.Fatal(err)
	}
	s := &scope{key: client.ObjectKeyFromObject(other), fl: other, pods: &pods{stray: []corev1.Pod{*cached}}}
	r.demoteHolder(t.Context(), s, pod.UID, 198, 0)
	if got := published(t, c, "p8"); got != 240 {
		t.Fatalf("pod p8 carries holder fence %d of db after other demoted it, want 240 untouched", got)
	}
}

// TestAPodHeldByAnotherFencedLeaseIsLeftAlone: pod p8, published as the
// holder of FencedLease other (fence 1, which other's Lease still holds),
// has been relabelled so that db selects it. db's pass neither makes it a
// standby of db nor publishes it: the pod would lose fence 151 while that
// grant holds, and other, seeing it selected again, would publish 151 to it
// once more (the simulation found it, seed 3160, with fence 151). Once
// other's grant has ended, db takes the pod. (The fake API numbers versions
// per object: db's Lease is created, empty, before the pod is relabelled, so
// that its grant's fence is above other's, as on a real API server.)
func TestAPodHeldByAnotherFencedLeaseIsLeftAlone(t *testing.T) {
	ctx, key := t.Context(), types.NamespacedName{Namespace: "n", Name: "db"}
	pod := runningPod("p8", time.Hour)
	pod.Labels["app"], pod.Labels[fencingv1alpha1.LabelLease] = "other", "other"
	pod.Annotations = map[string]string{fencingv1alpha1.AnnotationLease: "other", fencingv1alpha1.AnnotationRole: holder.RoleHolder,
		fencingv1alpha1.AnnotationFence: "1", fencingv1alpha1.AnnotationGrant: "1"}
	otherLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "other", Annotations: map[string]string{}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("p8"), LeaseTransitions: ptr.To(int32(1))}}
	record.Lease{State: holder.StateHeld, HolderUID: string(pod.UID), Fence: 1}.Apply(otherLease.Annotations)
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", Generation: 1, Finalizers: []string{fencingv1alpha1.Finalizer}},
		Spec:       fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	c, r := grantWorld(t, fl, pod)
	if err := c.Create(ctx, otherLease); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	relabelled := pod.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), relabelled); err != nil {
		t.Fatal(err)
	}
	relabelled.Labels["app"] = "db"
	if err := c.Update(ctx, relabelled); err != nil {
		t.Fatal(err)
	}
	otherFence := func() (string, int64) {
		t.Helper()
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
			t.Fatal(err)
		}
		return record.Published(p.Annotations)
	}
	for range 5 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		if lease, fence := otherFence(); lease != "other" || fence != 1 {
			t.Fatalf("db's pass while other's grant holds: pod p8 published as holder of %q with fence %d, want other's 1 untouched", lease, fence)
		}
	}

	// other's grant ends (revoked): db may take the pod.
	if err := c.Get(ctx, client.ObjectKeyFromObject(otherLease), otherLease); err != nil {
		t.Fatal(err)
	}
	otherLease.Annotations[record.LeaseState] = holder.StateRevoked
	if err := c.Update(ctx, otherLease); err != nil {
		t.Fatal(err)
	}
	fence := reconcileUntilCommitted(t, r, c, key, 0)
	for range 3 {
		if lease, got := otherFence(); lease == "db" && got == fence {
			return
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}
	lease, got := otherFence()
	t.Fatalf("after other's grant ended: pod p8 published as holder of %q with fence %d, want db's %d", lease, got, fence)
}
