package policy_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/policy"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestModelAgreesWithThePolicy holds policy.Allows, the statement of the
// operator-state policy that the simulation writes through, to the policy
// the API server evaluates: each write below is sent to the real API server
// as a dry run (admission policies judge dry runs as real writes, and
// nothing changes), by a caller RBAC lets through, and the API server's
// verdict must be the model's.
func TestModelAgreesWithThePolicy(t *testing.T) {
	f := newFixture(t)
	// A FencedLease whose holder renews its own grant, held by pod c.
	f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, "hr", map[string]string{"app": "hr"}, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
	}))).To(Succeed())
	c := f.readyPodWith("c", map[string]string{"app": "hr"}, time.Hour)
	f.g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "hr"}, l)).To(Succeed())
		g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationState, fencingv1alpha1.LeaseStateHeld))
		g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationHolderUID, string(c.UID)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	asA, err := testenv.PodClient(f.ctx, env.Config, f.a)
	f.g.Expect(err).NotTo(HaveOccurred())
	asC, err := testenv.PodClient(f.ctx, env.Config, c)
	f.g.Expect(err).NotTo(HaveOccurred())
	gc := "system:serviceaccount:kube-system:generic-garbage-collector"

	type who struct {
		user   string
		groups []string
		pod    *corev1.Pod
		c      client.Client
	}
	operator := who{user: testenv.OperatorUser, c: f.user(testenv.OperatorUser)}
	editor := who{user: "erin", c: f.user("erin")}
	holderA := who{user: f.standby.user, pod: f.a, c: asA}
	standbyB := who{user: f.standby.user, pod: f.b, c: f.standby.c}
	holderC := who{user: f.standby.user, pod: c, c: asC}
	collector := who{user: gc, c: f.user(gc)}
	breakGlass := who{user: breakGlassUser, c: f.user(breakGlassUser)}
	principals := policy.Principals{OperatorUsers: []string{testenv.OperatorUser}, BreakGlassUsers: []string{breakGlassUser},
		BreakGlassGroups: []string{breakGlassGroup}}

	getPod := func(name string) *corev1.Pod {
		p := &corev1.Pod{}
		f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, p)).To(Succeed())
		return p
	}
	getLease := func(name string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, l)).To(Succeed())
		return l
	}
	type write struct {
		name     string
		by       who
		resource string
		op       string
		old      client.Object
		mutate   func(client.Object)
	}
	annotate := func(k, v string) func(client.Object) {
		return func(o client.Object) {
			a := o.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[k] = v
			o.SetAnnotations(a)
		}
	}
	renew := func(o client.Object) {
		o.(*coordinationv1.Lease).Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(time.Second)))
	}
	writes := []write{
		{"the operator publishes a fence", operator, policy.Pods, policy.Update, getPod("a"), annotate(fencingv1alpha1.AnnotationFence, "1")},
		{"an editor publishes a fence", editor, policy.Pods, policy.Update, getPod("b"), annotate(fencingv1alpha1.AnnotationFence, "1")},
		{"a holder pod changes its own fence", holderA, policy.Pods, policy.Update, getPod("a"), annotate(fencingv1alpha1.AnnotationFence, "999")},
		{"an editor writes another annotation", editor, policy.Pods, policy.Update, getPod("b"), annotate("example.com/x", "y")},
		{"an editor removes the lease label", editor, policy.Pods, policy.Update, getPod("b"), func(o client.Object) {
			l := o.GetLabels()
			delete(l, fencingv1alpha1.LabelLease)
			o.SetLabels(l)
		}},
		{"an editor changes the pod's status", editor, policy.PodsStatus, policy.Update, getPod("b"), func(o client.Object) {
			o.(*corev1.Pod).Status.Message = "x"
		}},
		{"the holder renews its own grant", holderC, policy.Leases, policy.Update, getLease("hr"), renew},
		{"the holder renews and changes the holder", holderC, policy.Leases, policy.Update, getLease("hr"), func(o client.Object) {
			renew(o)
			o.(*coordinationv1.Lease).Spec.HolderIdentity = ptr.To("b")
		}},
		{"the holder renews and raises the fence", holderC, policy.Leases, policy.Update, getLease("hr"), func(o client.Object) {
			renew(o)
			annotate(fencingv1alpha1.AnnotationFence, "9223372036854775807")(o)
		}},
		{"the holder releases its grant", holderC, policy.Leases, policy.Update, getLease("hr"),
			annotate(fencingv1alpha1.LeaseAnnotationState, fencingv1alpha1.LeaseStateReleased)},
		{"the holder of an operator-renewed grant renews it", holderA, policy.Leases, policy.Update, getLease("db"), renew},
		{"another pod renews the grant", standbyB, policy.Leases, policy.Update, getLease("hr"), renew},
		{"another pod releases the grant", standbyB, policy.Leases, policy.Update, getLease("hr"),
			annotate(fencingv1alpha1.LeaseAnnotationState, fencingv1alpha1.LeaseStateReleased)},
		{"an editor changes the holder", editor, policy.Leases, policy.Update, getLease("db"), func(o client.Object) {
			o.(*coordinationv1.Lease).Spec.HolderIdentity = ptr.To("b")
		}},
		{"the operator renews", operator, policy.Leases, policy.Update, getLease("db"), renew},
		{"the garbage collector orphans", collector, policy.Leases, policy.Update, getLease("db"), func(o client.Object) {
			o.SetOwnerReferences(nil)
		}},
		{"the garbage collector changes the spec", collector, policy.Leases, policy.Update, getLease("db"), renew},
		{"an editor deletes the Lease", editor, policy.Leases, policy.Delete, getLease("db"), nil},
		{"a break-glass user deletes the Lease", breakGlass, policy.Leases, policy.Delete, getLease("db"), nil},
		{"an editor forges a Lease owned by a FencedLease", editor, policy.Leases, policy.Create, nil, nil},
		{"an editor patches the status", editor, policy.FencedLeasesStatus, policy.Update, f.fencedLease(), func(o client.Object) {
			o.(*fencingv1alpha1.FencedLease).Status.Fence++
		}},
		{"the operator patches the status", operator, policy.FencedLeasesStatus, policy.Update, f.fencedLease(), func(o client.Object) {
			o.(*fencingv1alpha1.FencedLease).Status.Candidates++
		}},
	}
	allowedSome, deniedSome := false, false
	for _, w := range writes {
		req := policy.Request{Resource: w.resource, Operation: w.op, User: w.by.user, Groups: w.by.groups, Old: w.old}
		if w.by.pod != nil {
			req.PodUID = string(w.by.pod.UID)
		}
		var err error
		switch w.op {
		case policy.Update:
			obj := w.old.DeepCopyObject().(client.Object)
			w.mutate(obj)
			req.New = obj
			if w.resource == policy.PodsStatus || w.resource == policy.FencedLeasesStatus {
				err = w.by.c.Status().Update(f.ctx, obj, client.DryRunAll)
			} else {
				err = w.by.c.Update(f.ctx, obj, client.DryRunAll)
			}
		case policy.Delete:
			err = w.by.c.Delete(f.ctx, w.old, client.DryRunAll)
		case policy.Create:
			forged := getLease("db").DeepCopy()
			forged.ObjectMeta = metav1.ObjectMeta{Namespace: f.ns, Name: "forged", Annotations: forged.Annotations, OwnerReferences: forged.OwnerReferences}
			req.New = forged
			err = w.by.c.Create(f.ctx, forged, client.DryRunAll)
		}
		byPolicy := err != nil && strings.Contains(err.Error(), policy.OperatorState)
		f.g.Expect(err == nil || byPolicy).To(BeTrue(), "%s: the API server refused for another reason: %v", w.name, err)
		model := policy.Allows(principals, req)
		f.g.Expect(model).To(Equal(!byPolicy), "%s: the model says allowed=%v, the API server %v", w.name, model, err)
		allowedSome, deniedSome = allowedSome || model, deniedSome || !model
	}
	f.g.Expect(allowedSome && deniedSome).To(BeTrue(), "the cases cover both verdicts")
}
