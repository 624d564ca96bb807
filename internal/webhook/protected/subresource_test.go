package protected_test

import (
	"fmt"
	"math"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// podTemplate is the selector and template of a workload named name.
func podTemplate(name string) (*metav1.LabelSelector, corev1.PodTemplateSpec) {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
}

func (f *fixture) statefulSet(name, fence string, replicas int32) *appsv1.StatefulSet {
	s := protect(&appsv1.StatefulSet{}, f.ns, name, "db", fence)
	sel, tmpl := podTemplate(name)
	s.Spec = appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), Selector: sel, Template: tmpl}
	return s
}

func (f *fixture) protectedDeployment(name, fence string) *appsv1.Deployment {
	d := protect(&appsv1.Deployment{}, f.ns, name, "db", fence)
	sel, tmpl := podTemplate(name)
	d.Spec = appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: sel, Template: tmpl}
	return d
}

// writeStatusOf reads obj, lets change alter the copy, and writes it
// through the status subresource as c with field manager fm.
func writeStatusOf[T client.Object](f *fixture, c client.Client, obj T, fm string, change func(T)) error {
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	change(obj)
	return c.Status().Update(f.ctx, obj, client.FieldOwner(fm))
}

func unlabel(o *appsv1.StatefulSet) { o.SetLabels(nil) }

// TestStaleHolderCannotUnprotectThroughStatus (issue 43, finding 1): with
// StatefulSets listed as a user lists them (the resource alone), the API
// server sends statefulsets/status too (R/*), and keeps label changes on
// it: a stale holder can neither remove the protected-by label through
// the status, with its old fence or without one, nor then overwrite what
// the new holder wrote.
func TestStaleHolderCannotUnprotectThroughStatus(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	a, _, n, asA, asB := f.holderAndStandby()
	f.g.Expect(asA.Create(f.ctx, f.statefulSet("db", fenceOf(n), 1))).To(Succeed())
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
	sts.Annotations[fencingv1alpha1.AnnotationFence] = fenceOf(m)
	sts.Spec.Replicas = ptr.To[int32](2)
	f.g.Expect(asB.Update(f.ctx, sts)).To(Succeed())

	obj := "StatefulSet " + f.ns + "/db (status)"
	f.expectDenied(writeStatusOf(f, asA, sts, fieldmanager.Format("sts-controller", n), unlabel),
		fmt.Sprintf(`%s: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`, obj))
	f.expectDenied(writeStatusOf(f, asA, sts, "sts-controller", unlabel),
		fmt.Sprintf(`%s: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`, obj))
	// Still protected: the stale holder's overwrite is refused.
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
	f.g.Expect(sts.Labels).To(HaveKeyWithValue(fencingv1alpha1.LabelProtectedBy, "db"))
	sts.Spec.Replicas = ptr.To[int32](5)
	delete(sts.Annotations, fencingv1alpha1.AnnotationFence)
	f.expectDenied(asA.Update(f.ctx, sts),
		fmt.Sprintf(`StatefulSet %s/db: write rejected: no fencedlease.io/fence annotation: only the holder of FencedLease "db" may write this object, with its fence`, f.ns))
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
	f.g.Expect(*sts.Spec.Replicas).To(BeEquivalentTo(2), "the new holder's write stands")
}

// TestStandbyCannotMoveTheFenceThroughStatus (issue 43, finding 2): the API
// server keeps annotation changes on deployments/status, so a status write
// could raise the stored fence out of the holder's reach. No subresource
// write moves it: not a standby's, not the holder's with its fence; the
// holder goes on writing and deleting the Deployment.
func TestStandbyCannotMoveTheFenceThroughStatus(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, asB := f.holderAndStandby()
	d := f.protectedDeployment("web", fenceOf(n))
	f.g.Expect(asA.Create(f.ctx, d)).To(Succeed())
	huge := func(o *appsv1.Deployment) {
		o.Annotations[fencingv1alpha1.AnnotationFence] = fmt.Sprint(int64(math.MaxInt64))
	}

	obj := "Deployment " + f.ns + "/web (status)"
	move := fmt.Sprintf(`a status write cannot change annotation fencedlease.io/fence (from "%d" to "%d"): only a write of the object itself moves the stored fence`, n, int64(math.MaxInt64))
	f.expectDenied(writeStatusOf(f, asB, d, "standby", huge), fmt.Sprintf(`%s: write rejected: %s`, obj, move))
	f.expectDenied(writeStatusOf(f, asB, d, fieldmanager.Format("standby", n), huge), fmt.Sprintf(`%s: write rejected: %s`, obj, move))
	f.expectDenied(writeStatusOf(f, asA, d, fieldmanager.Format("web-controller", n), huge), fmt.Sprintf(`%s: write rejected: %s`, obj, move))
	f.expectDenied(writeStatusOf(f, f.user("mallory"), d, "kubectl", huge), fmt.Sprintf(`%s: write rejected: %s`, obj, move))

	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
	f.g.Expect(d.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, fenceOf(n)))
	// The holder's status write with its fence, changing no fence, passes.
	f.g.Expect(writeStatusOf(f, asA, d, fieldmanager.Format("web-controller", n), func(o *appsv1.Deployment) { o.Status.ObservedGeneration = 7 })).To(Succeed())
	d.Spec.Replicas = ptr.To[int32](3)
	f.g.Expect(asA.Update(f.ctx, d)).To(Succeed())
	f.g.Expect(asA.Delete(f.ctx, d)).To(Succeed())
}

// TestHolderIdentityStatusWriteNeedsItsFence (issue 43, finding 3): a status
// write is held to the label rule, and needs its fence like any write: by
// the holder pod's identity, without a fence, it neither removes the
// protected-by label nor writes the status; the object stays protected
// from everyone else.
func TestHolderIdentityStatusWriteNeedsItsFence(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, _ := f.holderAndStandby()
	f.g.Expect(asA.Create(f.ctx, f.statefulSet("db", fenceOf(n), 1))).To(Succeed())
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}

	obj := "StatefulSet " + f.ns + "/db (status)"
	f.expectDenied(writeStatusOf(f, asA, sts, "sts-controller", unlabel),
		fmt.Sprintf(`%s: write rejected: label fencedlease.io/protected-by=db cannot be removed (only the operator or a break-glass user can)`, obj))
	f.expectDenied(writeStatusOf(f, asA, sts, "sts-controller", func(o *appsv1.StatefulSet) { o.Status.Replicas = 1 }),
		fmt.Sprintf(`%s: write rejected: no fencedlease.io/fence annotation: a status write cannot carry one on the object: it carries its fence in its field manager (<manager>;fencedlease.io/fence=<N>); only the holder of FencedLease "db" may write this object, with its fence`, obj))
	f.g.Expect(writeStatusOf(f, asA, sts, fieldmanager.Format("sts-controller", n), func(o *appsv1.StatefulSet) { o.Status.Replicas = 1 })).To(Succeed())

	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
	f.g.Expect(sts.Labels).To(HaveKeyWithValue(fencingv1alpha1.LabelProtectedBy, "db"))
	sts.Spec.Replicas = ptr.To[int32](4)
	f.expectDenied(f.user("mallory").Update(f.ctx, sts),
		fmt.Sprintf(`StatefulSet %s/db: write with fence %d rejected: user "mallory" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`, f.ns, n))
}
