package protected_test

import (
	. "github.com/onsi/gomega"

	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

func ownerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid}
}

// TestOwnersOfProtectedObjects (issue 43, finding 4): the holder cannot give
// a protected object an owner that a writer without the current fence
// could delete (an unlabelled ConfigMap, an object of a resource nothing
// protects, a FencedLease of another UID), neither on create, nor by an
// update that adds the owner, nor by labelling an object that already has
// one; the garbage collector would otherwise delete the protected object
// when that owner goes (test/e2e TestDeletingAnUnprotectedOwnerCannotDeleteAProtectedObject
// shows it with the real garbage collector). An owner protected by the
// same FencedLease, or the FencedLease itself, is accepted; one the
// operator may not read (a ConfigMap: it reads none) is refused, saying so.
func TestOwnersOfProtectedObjects(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, _ := f.holderAndStandby()
	fence := fenceOf(n)

	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "parent"}}
	f.g.Expect(f.c.Create(f.ctx, parent)).To(Succeed())
	guarded := f.configMap("guarded", "db", fence, "p")
	f.g.Expect(asA.Create(f.ctx, guarded)).To(Succeed())
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
	flRef := ownerRef(fencingv1alpha1.GroupVersion.String(), "FencedLease", "db", fl.UID)
	wrongFL := ownerRef(fencingv1alpha1.GroupVersion.String(), "FencedLease", "db", "not-"+fl.UID)
	unprotected := ownerRef("v1", "ConfigMap", "parent", parent.UID)
	pod := &corev1.Pod{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "b"}, pod)).To(Succeed())
	podRef := ownerRef("v1", "Pod", "b", pod.UID)

	msg := func(child, owner string) string {
		return fmt.Sprintf(`ConfigMap %s/%s: owner %s is not protected by FencedLease "db": an owner of a protected object must be that FencedLease `+
			`or an object it protects, of a protected resource; otherwise a writer without the current fence could delete the owner, `+
			`and the garbage collector would then delete this object`, f.ns, child, owner)
	}
	// The operator reads no ConfigMap: a ConfigMap owner cannot be shown to
	// be protected, labelled or not.
	unreadable := " (the operator may not read ConfigMap objects, so it cannot tell: grant it get on them to allow such owners)"
	child := func(name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
		cm := f.configMap(name, "db", fence, "c")
		cm.OwnerReferences = owners
		return cm
	}
	f.expectDenied(asA.Create(f.ctx, child("c1", unprotected)), msg("c1", fmt.Sprintf("ConfigMap parent (uid %s)", parent.UID))+unreadable)
	f.expectDenied(asA.Create(f.ctx, child("c2", podRef)), msg("c2", fmt.Sprintf("Pod b (uid %s)", pod.UID)))
	f.expectDenied(asA.Create(f.ctx, child("c3", wrongFL)), msg("c3", fmt.Sprintf("FencedLease db (uid not-%s)", fl.UID)))
	f.g.Expect(asA.Create(f.ctx, child("c4", flRef))).To(Succeed())
	// A protected Deployment (the operator may read Deployments, as the
	// chart grants it for every listed resource but ConfigMaps and Secrets).
	dep := f.protectedDeployment("web", fence)
	f.g.Expect(asA.Create(f.ctx, dep)).To(Succeed())
	f.g.Expect(asA.Create(f.ctx, child("c5", ownerRef("apps/v1", "Deployment", "web", dep.UID)))).To(Succeed())
	// A protected ConfigMap, which the operator may not read: refused, and
	// the message says why.
	f.expectDenied(asA.Create(f.ctx, child("c6", ownerRef("v1", "ConfigMap", "guarded", guarded.UID))),
		msg("c6", fmt.Sprintf("ConfigMap guarded (uid %s)", guarded.UID))+unreadable)

	// An update that adds an unprotected owner.
	c5 := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c5"}, c5)).To(Succeed())
	c5.OwnerReferences = append(c5.OwnerReferences, unprotected)
	f.expectDenied(asA.Update(f.ctx, c5), msg("c5", fmt.Sprintf("ConfigMap parent (uid %s)", parent.UID))+unreadable)

	// Labelling an object that already has an unprotected owner.
	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain", OwnerReferences: []metav1.OwnerReference{unprotected}}}
	f.g.Expect(f.c.Create(f.ctx, plain)).To(Succeed())
	plain.Labels = map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}
	plain.Annotations = map[string]string{fencingv1alpha1.AnnotationFence: fence}
	f.expectDenied(asA.Update(f.ctx, plain), msg("plain", fmt.Sprintf("ConfigMap parent (uid %s)", parent.UID))+unreadable)

	// Nothing of the refused writes was stored.
	for _, name := range []string{"c1", "c2", "c3", "c6"} {
		f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &corev1.ConfigMap{})).NotTo(Succeed())
	}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c5"}, c5)).To(Succeed())
	f.g.Expect(c5.OwnerReferences).To(HaveLen(1))
}
