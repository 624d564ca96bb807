package protected_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var widgetKind = schema.GroupVersionKind{Group: "examples.fencedlease.io", Version: "v1alpha1", Kind: "Widget"}

// widget is a Widget protected by lease, with fence ("" for none).
func (f *fixture) widget(name, lease, fence string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetKind)
	u.SetNamespace(f.ns)
	u.SetName(name)
	u.SetLabels(map[string]string{fencingv1alpha1.LabelProtectedBy: lease})
	if fence != "" {
		u.SetAnnotations(map[string]string{fencingv1alpha1.AnnotationFence: fence})
	}
	_ = unstructured.SetNestedField(u.Object, size, "spec", "size")
	return u
}

func (f *fixture) getWidget(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetKind)
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, u)).To(Succeed())
	return u
}

// writeStatus writes a Widget's status.observed as c, with a field manager.
func (f *fixture) writeStatus(c client.Client, name string, observed int64, fieldManager string) error {
	u := f.getWidget(name)
	_ = unstructured.SetNestedField(u.Object, observed, "status", "observed")
	return c.Status().Update(f.ctx, u, client.FieldOwner(fieldManager))
}

// TestCustomResourceAndItsStatus: a custom resource listed in the fencing
// webhook's configuration is protected as ConfigMaps are: the holder writes
// it with its fence, nobody else writes or deletes it. Its status, whose
// writes cannot carry the annotation, takes the fence from the field
// manager, checked as the annotation is, and needs it like any write: the
// holder pod's identity alone is not enough (issue 43).
func TestCustomResourceAndItsStatus(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	a, _, n, asA, asB := f.holderAndStandby()
	obj := "Widget " + f.ns + "/w"

	f.g.Expect(asA.Create(f.ctx, f.widget("w", "db", fenceOf(n), 1))).To(Succeed())
	f.expectDenied(asB.Create(f.ctx, f.widget("w2", "db", fenceOf(n), 1)),
		fmt.Sprintf(`Widget %s/w2: write with fence %d rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence %d)`, f.ns, n, n))
	f.expectDenied(asA.Create(f.ctx, f.widget("w3", "db", "", 1)),
		fmt.Sprintf(`Widget %s/w3: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, f.ns))

	// The status: with the fence in the field manager, and without.
	noFence := obj + ` (status): write rejected: no fencedlease.io/fence annotation: a status write cannot carry one on the object: it carries its fence in its field manager (<manager>;fencedlease.io/fence=<N>); only the holder of FencedLease "db" may write this object, with its fence`
	f.g.Expect(f.writeStatus(asA, "w", 1, fieldmanager.Format("widget-controller", n))).To(Succeed())
	f.g.Expect(f.writeStatus(asA, "w", 2, fieldmanager.Format("widget-controller", n))).To(Succeed())
	f.expectDenied(f.writeStatus(asA, "w", 3, "widget-controller"), noFence)
	f.expectDenied(f.writeStatus(asB, "w", 3, "widget-controller"), noFence)
	f.expectDenied(f.writeStatus(asB, "w", 3, fieldmanager.Format("widget-controller", n)),
		fmt.Sprintf(`%s (status): write with fence %d rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence %d)`, obj, n, n))
	f.expectDenied(f.writeStatus(asA, "w", 3, fieldmanager.Format("widget-controller", n+100)),
		fmt.Sprintf(`%s (status): write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, obj, n+100, n))
	f.expectDenied(f.writeStatus(asA, "w", 3, "widget-controller;fencedlease.io/fence=0042"),
		`Widget `+f.ns+`/w (status): write rejected: the fence in the field manager (;fencedlease.io/fence=<N>): invalid fence "0042": leading zero`)
	f.expectDenied(f.writeStatus(f.user("mallory"), "w", 3, fieldmanager.Format("kubectl", n)),
		fmt.Sprintf(`%s (status): write with fence %d rejected: user "mallory" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`, obj, n))

	// b takes over: a's writes, with its fence or none, are refused; b's are not.
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)
	f.expectDenied(f.writeStatus(asA, "w", 4, fieldmanager.Format("widget-controller", n)),
		fmt.Sprintf(`%s (status): write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, obj, n, m))
	f.expectDenied(f.writeStatus(asA, "w", 4, "widget-controller"), noFence)
	u := f.getWidget("w")
	u.SetAnnotations(map[string]string{fencingv1alpha1.AnnotationFence: fenceOf(n)})
	_ = unstructured.SetNestedField(u.Object, int64(9), "spec", "size")
	f.expectDenied(asA.Update(f.ctx, u), fmt.Sprintf(`%s: write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, obj, n, m))
	f.expectDenied(asA.Delete(f.ctx, f.widget("w", "db", "", 0)),
		fmt.Sprintf(`%s: delete rejected: pod a is not the holder of FencedLease "db" (holder: pod b, fence %d)`, obj, m))
	f.g.Expect(f.writeStatus(asB, "w", 5, fieldmanager.Format("widget-controller", m))).To(Succeed())
	u = f.getWidget("w")
	u.SetAnnotations(map[string]string{fencingv1alpha1.AnnotationFence: fenceOf(m)})
	f.g.Expect(asB.Update(f.ctx, u)).To(Succeed())
	observed, _, _ := unstructured.NestedInt64(f.getWidget("w").Object, "status", "observed")
	f.g.Expect(observed).To(BeEquivalentTo(5), "only the holders' status writes went through")
	// Once the object carries b's fence, a status write below it is refused
	// for the object's order too (here by the stale fence first).
	f.g.Expect(decisions(map[string]string{"resource": "widgets.examples.fencedlease.io/status", "result": "allowed"})).To(BeNumerically(">=", 3))
	f.g.Expect(asB.Delete(f.ctx, f.widget("w", "db", "", 0))).To(Succeed())
}

// TestScale: a scale subresource carries no labels, so its webhook sees
// every scale write of the resources listed and reads the object's label:
// a protected Deployment or Widget is scaled by the holder pod alone, with
// its fence in the field manager; an unprotected one by anyone RBAC lets.
func TestScale(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, asB := f.holderAndStandby()

	protected := f.deployment("web", map[string]string{fencingv1alpha1.LabelProtectedBy: "db"})
	protected.Annotations = map[string]string{fencingv1alpha1.AnnotationFence: fenceOf(n)}
	f.g.Expect(asA.Create(f.ctx, protected)).To(Succeed())
	f.g.Expect(f.c.Create(f.ctx, f.deployment("free", nil))).To(Succeed())
	obj := "Deployment " + f.ns + "/web (scale)"
	expectDenied := func(err error, message string) {
		t.Helper()
		f.g.Expect(err).To(MatchError(`admission webhook "protected-scale.fencedlease.io" denied the request: ` + message))
	}

	expectDenied(f.scaleTo(asA, protected, 2, "autoscaler"),
		obj+`: write rejected: no fencedlease.io/fence annotation: a scale write cannot carry one on the object: it carries its fence in its field manager (<manager>;fencedlease.io/fence=<N>); only the holder of FencedLease "db" may write this object, with its fence`)
	f.g.Expect(f.scaleTo(asA, protected, 3, fieldmanager.Format("autoscaler", n))).To(Succeed())
	expectDenied(f.scaleTo(asB, protected, 4, fieldmanager.Format("autoscaler", n)),
		fmt.Sprintf(`%s: write with fence %d rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence %d)`, obj, n, n))
	expectDenied(f.scaleTo(f.user("mallory"), protected, 4, fieldmanager.Format("kubectl", n)),
		fmt.Sprintf(`%s: write with fence %d rejected: user "mallory" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`, obj, n))
	expectDenied(f.scaleTo(asA, protected, 4, fieldmanager.Format("autoscaler", n-1)),
		fmt.Sprintf(`%s: write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, obj, n-1, n))
	got := &appsv1.Deployment{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(protected), got)).To(Succeed())
	f.g.Expect(*got.Spec.Replicas).To(BeEquivalentTo(3))

	// Not protected: scaled by anyone.
	free := f.deployment("free", nil)
	f.g.Expect(f.scaleTo(f.user("mallory"), free, 5, "kubectl")).To(Succeed())

	// A Widget's scale is protected the same way.
	f.g.Expect(asA.Create(f.ctx, f.widget("w", "db", fenceOf(n), 1))).To(Succeed())
	w := f.widget("w", "db", "", 0)
	f.g.Expect(f.scaleTo(asA, w, 2, fieldmanager.Format("autoscaler", n))).To(Succeed())
	expectDenied(f.scaleTo(asB, w, 3, fieldmanager.Format("autoscaler", n)),
		fmt.Sprintf(`Widget %s/w (scale): write with fence %d rejected: pod b is not the holder of FencedLease "db" (holder: pod a, fence %d)`, f.ns, n, n))
}

// TestUnlistedResourcesAreNotIntercepted: a resource the configuration does
// not list is not sent to the webhook, labelled or not: a Service labelled
// protected-by is written by anyone RBAC lets, and no decision is counted.
func TestUnlistedResourcesAreNotIntercepted(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	f.readyPod("a", time.Hour)
	f.waitHolder("db", "a", 0)
	before := decisions(nil)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "s", Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	mallory := f.user("mallory")
	f.g.Expect(mallory.Create(f.ctx, svc)).To(Succeed())
	svc.Spec.Ports[0].Port = 81
	f.g.Expect(mallory.Update(f.ctx, svc)).To(Succeed())
	f.g.Expect(mallory.Delete(f.ctx, svc)).To(Succeed())
	f.g.Expect(decisions(nil)).To(Equal(before), "the webhook decided a write of an unlisted resource")
}

// TestUnknownResourceIsReported: the configuration lists gizmos.example.com,
// which the API server does not serve: the operator says so (a Warning
// Event on the configuration, the gauge), rather than let a user believe
// gizmos protected.
func TestUnknownResourceIsReported(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(f.c.List(f.ctx, &list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
		found := false
		for _, e := range list.Items {
			if e.Reason == coverage.EventUnknownResource && e.Regarding.Kind == "ValidatingWebhookConfiguration" &&
				strings.Contains(e.Note, "resource gizmos.gizmos.example.com is listed in the fencing webhook's configuration, but the API server does not serve it") {
				found = true
			}
		}
		g.Expect(found).To(BeTrue(), "a Warning Event names the unknown resource")
		g.Expect(gauge("fencedlease_webhook_unknown_resources")).To(Equal(1.0))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// deployment is a Deployment of the test's namespace with one replica.
func (f *fixture) deployment(name string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}}}
}

// scaleTo writes obj's scale subresource as c, with that field manager.
func (f *fixture) scaleTo(c client.Client, obj client.Object, replicas int32, fieldManager string) error {
	s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: obj.GetName()}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	return c.SubResource("scale").Update(f.ctx, obj, client.WithSubResourceBody(s), client.FieldOwner(fieldManager))
}
