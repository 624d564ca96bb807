package policy_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

func leaseDenied(ns, name, user, what string) string {
	return fmt.Sprintf(`Lease %s/%s belongs to a FencedLease and is written by the fencedlease operator only: user %q may not %s`, ns, name, user, what)
}

const (
	deleteIt = "delete it (the garbage collector, the namespace controller and break-glass users may)"
	// podRule ends the denial of a change that a pod tries.
	podRule = " (the pod it names may only renew its own held grant, changing spec.renewTime alone, or release it)"
)

func (f *fixture) lease(name string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, l)).To(Succeed())
	return l
}

// TestOwnedLease: the Lease a FencedLease owns is the record of its grants
// and the floor of its next fence. Nobody but the operator creates one (a
// forged Lease with a FencedLease owner would be adopted with its fence),
// changes it (its finalizer too), by update, JSON patch or server-side apply,
// or deletes it, one by one or in a DELETECOLLECTION; break-glass users may
// delete it, the garbage collector may orphan it. Leases that no FencedLease
// owns are left alone.
func TestOwnedLease(t *testing.T) {
	f := newFixture(t)
	owner := f.fencedLease()
	ref := metav1.OwnerReference{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedLease", Name: "db", UID: owner.UID, Controller: ptr.To(true)}
	f.g.Expect(f.c.Create(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a-free"}})).To(Succeed())
	for i, c := range f.callers() {
		t.Run(c.who, func(t *testing.T) {
			g := NewWithT(t)
			changeIt := "change it"
			if c.who == "standby" {
				changeIt += podRule
			}
			// The floor raised out of reach, three ways.
			l := f.lease("db")
			l.Annotations[fencingv1alpha1.AnnotationFence] = "9223372036854775807"
			expectDenied(g, c.c.Update(f.ctx, l), `leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", c.user, changeIt))
			jsonPatch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/metadata/annotations/fencedlease.io~1fence","value":"9223372036854775807"}]`))
			expectDenied(g, c.c.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, jsonPatch),
				`leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", c.user, changeIt))
			ac := coordinationv1ac.Lease("db", f.ns).WithSpec(coordinationv1ac.LeaseSpec().WithHolderIdentity("b"))
			expectDenied(g, c.c.Apply(f.ctx, ac, client.FieldOwner("intruder"), client.ForceOwnership),
				`leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", c.user, changeIt))
			// Taking the FencedLease's owner reference off is a change too.
			unown := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`))
			expectDenied(g, c.c.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, unown),
				`leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", c.user, changeIt))
			// So is taking the operator's finalizer off: it keeps a deleted
			// Lease, the record of its grant, until the grant is over.
			unfinal := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))
			expectDenied(g, c.c.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, unfinal),
				`leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", c.user, changeIt))
			// A forged Lease that claims a FencedLease as its owner.
			name := fmt.Sprintf("forged-%d", i)
			forged := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, OwnerReferences: []metav1.OwnerReference{ref},
				Annotations: map[string]string{fencingv1alpha1.AnnotationFence: "9223372036854775807"}}}
			expectDenied(g, c.c.Create(f.ctx, forged), fmt.Sprintf("leases.coordination.k8s.io %q", name), leaseDenied(f.ns, name, c.user, "create it"))
			// Deleted, alone or with the rest of the namespace's Leases: the
			// Lease a-free (before db in name order) goes, db stays.
			expectDenied(g, c.c.Delete(f.ctx, f.lease("db")), `leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", c.user, deleteIt))
			// (The API server names no object in the error of a collection.)
			expectDenied(g, c.c.DeleteAllOf(f.ctx, &coordinationv1.Lease{}, client.InNamespace(f.ns)),
				`leases.coordination.k8s.io "Unknown"`, leaseDenied(f.ns, "db", c.user, deleteIt))
			g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "a-free"}, &coordinationv1.Lease{}))).To(BeTrue())
			// Leases of their own: theirs.
			free := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a-free"}}
			g.Expect(c.c.Create(f.ctx, free)).To(Succeed())
			free.Spec.HolderIdentity = ptr.To("anyone")
			g.Expect(c.c.Update(f.ctx, free)).To(Succeed())
		})
	}
	l := f.lease("db")
	f.g.Expect(l.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(fmt.Sprint(f.fence)))
	f.g.Expect(metav1.IsControlledBy(l, owner)).To(BeTrue())
	f.g.Expect(l.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
	for i := range 3 {
		f.g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: fmt.Sprintf("forged-%d", i)}, &coordinationv1.Lease{}))).To(BeTrue())
	}

	// The operator changes it (it renews and grants through it all along).
	touch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test.fencedlease.io/touched":"yes"}}}`))
	f.g.Expect(f.operator.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, touch)).To(Succeed())
	// A break-glass user may delete it and nothing else; the operator
	// revokes its grant, lets it go once the grant is over, and re-creates
	// it, keeping the floor.
	bob := f.user(breakGlassUser)
	expectDenied(f.g, bob.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, touch),
		`leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", breakGlassUser, "change it"))
	old := f.lease("db")
	f.g.Expect(f.user("carol", breakGlassGroup).Delete(f.ctx, old)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, l)).To(Succeed())
		g.Expect(l.UID).NotTo(Equal(old.UID))
		g.Expect(metav1.IsControlledBy(l, owner)).To(BeTrue())
		g.Expect(l.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
		floor, err := record.ParseFence(l.Annotations[fencingv1alpha1.AnnotationFence])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(floor).To(BeNumerically(">=", f.fence))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// The garbage collector may orphan it (take the owner references off and
	// change nothing else), not change it otherwise.
	gc := f.user("system:serviceaccount:kube-system:generic-garbage-collector")
	spec := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"holderIdentity":"b"}}`))
	expectDenied(f.g, gc.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, spec),
		`leases.coordination.k8s.io "db"`, leaseDenied(f.ns, "db", "system:serviceaccount:kube-system:generic-garbage-collector", "change it"))
	orphan := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`))
	f.g.Expect(gc.Patch(f.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"}}, orphan)).To(Succeed())
	f.g.Expect(f.lease("db").OwnerReferences).To(BeEmpty())
}

// TestHolderRenewalAndRelease: with renewal Holder, the pod that the Lease
// names renews its own grant with its bound token, changing spec.renewTime
// and nothing else, and may release it; a standby (even one that copied the
// holder's fence), another pod and the holder trying to change anything else
// are refused; a released grant can no longer be renewed.
func TestHolderRenewalAndRelease(t *testing.T) {
	f := newFixture(t)
	f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, "hr", map[string]string{"app": "hr"}, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 30
	}))).To(Succeed())
	h1 := f.readyPodWith("h1", map[string]string{"app": "hr"}, time.Hour)
	h2 := f.readyPodWith("h2", map[string]string{"app": "hr"}, time.Minute)
	holder, err := testenv.PodClient(f.ctx, env.Config, h1)
	f.g.Expect(err).NotTo(HaveOccurred())
	standby, err := testenv.PodClient(f.ctx, env.Config, h2)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Eventually(func(g Gomega) {
		l := f.lease("hr")
		g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("held"))
		g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]).To(Equal(string(h1.UID)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	renew := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		return l
	}
	standbyUser := "system:serviceaccount:" + f.ns + ":default"

	// The holder renews.
	f.g.Expect(f.retry(func() error { return holder.Update(f.ctx, renew(f.lease("hr"))) })).To(Succeed())
	// The holder may not change anything else, not even with its renewal.
	for what, mutate := range map[string]func(*coordinationv1.Lease){
		"holderIdentity":   func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("h2") },
		"leaseTransitions": func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions + 5) },
		"the fence":        func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.AnnotationFence] = "9223372036854775807" },
		"the holder UID": func(l *coordinationv1.Lease) {
			l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] = string(h2.UID)
		},
		"leaseDuration": func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](3600) },
	} {
		err := f.retry(func() error {
			l := renew(f.lease("hr"))
			mutate(l)
			return holder.Update(f.ctx, l)
		})
		f.g.Expect(err).To(HaveOccurred(), "changing %s", what)
		expectDenied(f.g, err, `leases.coordination.k8s.io "hr"`, leaseDenied(f.ns, "hr", standbyUser, "change it"+podRule))
	}
	// A standby may not renew, nor release.
	expectDenied(f.g, f.retry(func() error { return standby.Update(f.ctx, renew(f.lease("hr"))) }), `leases.coordination.k8s.io "hr"`,
		leaseDenied(f.ns, "hr", standbyUser, "change it"+podRule))
	release := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "released"
		return l
	}
	expectDenied(f.g, f.retry(func() error { return standby.Update(f.ctx, release(f.lease("hr"))) }), `leases.coordination.k8s.io "hr"`,
		leaseDenied(f.ns, "hr", standbyUser, "change it"+podRule))
	// Nor may a pod of the other FencedLease (the holder of db).
	a, err := testenv.PodClient(f.ctx, env.Config, f.a)
	f.g.Expect(err).NotTo(HaveOccurred())
	expectDenied(f.g, f.retry(func() error { return a.Update(f.ctx, renew(f.lease("hr"))) }), `leases.coordination.k8s.io "hr"`,
		leaseDenied(f.ns, "hr", standbyUser, "change it"+podRule))
	// In renewal Operator, the holder of db may not renew its grant itself.
	expectDenied(f.g, f.retry(func() error { return a.Update(f.ctx, renew(f.lease("db"))) }), `leases.coordination.k8s.io "db"`,
		leaseDenied(f.ns, "db", standbyUser, "change it"+podRule))

	// The holder releases; its grant can then no longer be renewed.
	f.g.Expect(f.retry(func() error { return holder.Update(f.ctx, release(f.lease("hr"))) })).To(Succeed())
	expectDenied(f.g, f.retry(func() error { return holder.Update(f.ctx, renew(f.lease("hr"))) }), `leases.coordination.k8s.io "hr"`,
		leaseDenied(f.ns, "hr", standbyUser, "change it"+podRule))
	// The operator grants the standby at once.
	f.g.Eventually(func() string { return f.lease("hr").Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] }).
		WithTimeout(timeout).WithPolling(poll).Should(Equal(string(h2.UID)))
}

// TestHolderReleasesARevokedGrant: the operator revokes h1's grant (its
// containers stop being ready); under Safe takeover nobody is granted until
// it expires, unless h1 says that its work has stopped. h1 may release the
// revoked grant, and then only that; it may not renew it; a standby may not
// release it. The standby is granted at once, long before the 60 s lease.
func TestHolderReleasesARevokedGrant(t *testing.T) {
	f := newFixture(t)
	f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, "rv", map[string]string{"app": "rv"}, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 60
	}))).To(Succeed())
	h1 := f.readyPodWith("h1", map[string]string{"app": "rv"}, time.Hour)
	h2 := f.readyPodWith("h2", map[string]string{"app": "rv"}, time.Minute)
	holder, err := testenv.PodClient(f.ctx, env.Config, h1)
	f.g.Expect(err).NotTo(HaveOccurred())
	standby, err := testenv.PodClient(f.ctx, env.Config, h2)
	f.g.Expect(err).NotTo(HaveOccurred())
	state := func(want string) {
		f.g.Eventually(func(g Gomega) {
			l := f.lease("rv")
			g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal(want))
			g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]).To(Equal(string(h1.UID)))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	}
	state("held")
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, h1)).To(Succeed())
	state("revoked")
	standbyUser := "system:serviceaccount:" + f.ns + ":default"
	with := func(mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
		l := f.lease("rv").DeepCopy()
		mutate(l)
		return l
	}
	release := func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "released" }
	renew := func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now())) }

	expectDenied(f.g, f.retry(func() error { return holder.Update(f.ctx, with(renew)) }), `leases.coordination.k8s.io "rv"`,
		leaseDenied(f.ns, "rv", standbyUser, "change it"+podRule))
	expectDenied(f.g, f.retry(func() error {
		return holder.Update(f.ctx, with(func(l *coordinationv1.Lease) { l.Annotations[fencingv1alpha1.LeaseAnnotationState] = "held" }))
	}), `leases.coordination.k8s.io "rv"`, leaseDenied(f.ns, "rv", standbyUser, "change it"+podRule))
	expectDenied(f.g, f.retry(func() error { return standby.Update(f.ctx, with(release)) }), `leases.coordination.k8s.io "rv"`,
		leaseDenied(f.ns, "rv", standbyUser, "change it"+podRule))
	state("revoked")

	f.g.Expect(f.retry(func() error { return holder.Update(f.ctx, with(release)) })).To(Succeed())
	f.g.Eventually(func() string { return f.lease("rv").Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] }).
		WithTimeout(10 * time.Second).WithPolling(poll).Should(Equal(string(h2.UID)))
}
