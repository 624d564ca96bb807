package fencedlease_test

import (
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// degraded returns "reason: message" of the FencedLease's Degraded
// condition while it is True, "" otherwise.
func (f *fixture) degraded(name string) string {
	c := meta.FindStatusCondition(f.get(name).Status.Conditions, fencingv1alpha1.ConditionDegraded)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Reason + ": " + c.Message
}

// TestLeaseOfAnotherOwnerIsLeftAlone: a Lease of the FencedLease's name
// that the FencedLease does not control is left alone. Four such Leases,
// each of the name of a FencedLease that selects one ready pod of its
// own: one owned by nothing (it carries a holder and a renewTime, as a
// Lease of some other leader election would), one controlled by a
// ConfigMap, one controlled by a FencedLease of another name, and one
// owned, but not controlled, by a FencedLease of its name. Each
// FencedLease reports Degraded LeaseConflict (and so Held False and Ready
// False), and the operator writes neither the Lease (same resourceVersion,
// same content) nor the pod (same resourceVersion, nothing published).
// Once the free Lease is deleted, its FencedLease grants its pod: the
// conflict was all that stood in the way.
//
// What a broken implementation does: if adoptLease took over any Lease of
// the name (or any with a FencedLease among its owners), the Lease would
// get a new owner reference, the operator's finalizer and a grant, and the
// pod would be published; if getOrCreateLease wrote a Lease over one it
// cannot read as its own, the resourceVersion would move.
func TestLeaseOfAnotherOwnerIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owner"}}
	f.g.Expect(f.c.Create(f.ctx, cm)).To(Succeed())
	fencedLeaseRef := func(name string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedLease", Name: name,
			UID: types.UID("0c1d3c4e-0000-4000-8000-" + strconv.Itoa(100000000000+len(name))), Controller: ptr.To(controller)}
	}
	owners := map[string][]metav1.OwnerReference{
		"free":      nil,
		"configmap": {{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true)}},
		"other":     {fencedLeaseRef("someone-else", true)},
		"unctrl":    {fencedLeaseRef("unctrl", false)},
	}
	renewed := metav1.NewMicroTime(time.Now().Truncate(time.Second))
	leases := map[string]*coordinationv1.Lease{}
	pods := map[string]*corev1.Pod{}
	for name, refs := range owners {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, OwnerReferences: refs,
				Annotations: map[string]string{"example.com/owner": "someone else"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("some-process"), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &renewed, LeaseTransitions: ptr.To[int32](3)},
		}
		f.g.Expect(f.c.Create(f.ctx, l)).To(Succeed())
		leases[name] = l
		pods[name] = f.readyPodWith(name+"-pod", time.Hour, map[string]string{"app": name})
	}
	// The Leases and pods are there before the operator starts, so that its
	// first look at each FencedLease finds them.
	f.startManager(testenv.ManagerOptions{})
	for name := range owners {
		pods[name] = f.pod(name + "-pod")
		f.fencedLease(name, func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Selector.MatchLabels = map[string]string{"app": name} })
	}

	for name := range owners {
		want := fencingv1alpha1.ReasonLeaseConflict + ": Lease " + f.ns + "/" + name +
			" exists and is not controlled by this FencedLease; delete or rename it"
		f.g.Eventually(func() string { return f.degraded(name) }).WithTimeout(timeout).WithPolling(poll).Should(Equal(want), name)
		st := f.get(name).Status
		held := meta.FindStatusCondition(st.Conditions, fencingv1alpha1.ConditionHeld)
		f.g.Expect(held).NotTo(BeNil())
		f.g.Expect(held.Status).To(Equal(metav1.ConditionFalse))
		f.g.Expect(held.Reason).To(Equal(fencingv1alpha1.ReasonLeaseConflict))
		f.g.Expect(meta.IsStatusConditionTrue(st.Conditions, fencingv1alpha1.ConditionReady)).To(BeFalse())
		f.g.Expect(st.Holder).To(BeNil())
		f.g.Expect(st.Fence).To(BeZero())
	}
	f.g.Consistently(func(g Gomega) {
		for name, l := range leases {
			now := &coordinationv1.Lease{}
			g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(l), now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(l.ResourceVersion), "Lease %s was written", name)
			g.Expect(now.OwnerReferences).To(Equal(l.OwnerReferences))
			g.Expect(now.Finalizers).To(BeEmpty())
			g.Expect(now.Annotations).To(Equal(l.Annotations))
			g.Expect(now.Spec).To(Equal(l.Spec))
			p := &corev1.Pod{}
			g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(pods[name]), p)).To(Succeed())
			g.Expect(p.ResourceVersion).To(Equal(pods[name].ResourceVersion), "pod %s was written", p.Name)
		}
		g.Expect(f.holders()).To(BeEmpty())
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	// The free Lease goes: its FencedLease creates its own and grants.
	f.g.Expect(f.c.Delete(f.ctx, leases["free"])).To(Succeed())
	f.poke("free")
	pod, _ := f.waitHolder("free")
	f.g.Expect(pod).To(Equal("free-pod"))
	f.g.Expect(metav1IsControlledBy(f.lease("free"), f.get("free"))).To(BeTrue())
	f.g.Expect(f.degraded("free")).To(BeEmpty())
	f.g.Expect(f.degraded("other")).To(HavePrefix(fencingv1alpha1.ReasonLeaseConflict + ": "))
}

// leaveLease grants a FencedLease db (takeover Immediate) to pod a, with
// pod b a standby, then stops the operator and deletes db, its finalizer
// taken off by hand, so that its Lease stays behind (envtest runs no
// garbage collector): a Lease left by an earlier FencedLease of the name,
// controlled by a UID that no longer exists. It returns that Lease, the
// fence of a's grant and pod a.
func leaveLease(f *fixture) (*coordinationv1.Lease, int64, *corev1.Pod) {
	f.t.Helper()
	m, err := testenv.StartManager(f.ctx, env.Config, testenv.ManagerOptions{Namespace: f.ns})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.t.Cleanup(m.Crash)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	f.g.Expect(m.Stop()).To(Succeed())

	old := f.get("db")
	f.g.Expect(f.c.Delete(f.ctx, old)).To(Succeed())
	live := f.get("db")
	base := live.DeepCopy()
	live.Finalizers = nil
	f.g.Expect(f.c.Patch(f.ctx, live, client.MergeFrom(base))).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKeyFromObject(old), &fencingv1alpha1.FencedLease{}))
	}).WithTimeout(timeout).Should(BeTrue())

	l := f.lease("db")
	f.g.Expect(metav1IsControlledBy(l, old)).To(BeTrue(), "the Lease is left controlled by the deleted FencedLease")
	f.g.Expect(l.DeletionTimestamp).To(BeNil())
	f.g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fence, 10)))
	f.g.Expect(ptr.Deref(l.Spec.LeaseTransitions, 0)).To(Equal(int32(1)))
	return l, fence, a
}

// TestLeaseOfAnEarlierFencedLeaseIsAdoptedWithItsFence: a FencedLease
// created under the name of an earlier one whose Lease was left behind
// (leaveLease) adopts that Lease, record and all: the same Lease object
// (same UID), now controlled by the new FencedLease alone and carrying the
// operator's finalizer.
//
//   - The grant goes on: a, the old holder, is no longer eligible, so b
//     is granted (takeover Immediate) with a fence above the old Lease's,
//     as the grant after a's on the same Lease: leaseTransitions and the
//     status's transitions go on from the old count (2), and a is made a
//     standby.
//   - The fence is the floor: the left Lease records a fence above every
//     revision the store will hand out (as after a restore of etcd;
//     written here by hand). The new FencedLease has no status and the
//     new operator no memory, so the Lease is the only record of that
//     fence. a's grant is ended (its Lease's version is below the floor)
//     and no grant is committed: Degraded FenceRegression, nobody
//     published, the Lease's fence unchanged.
//
// What a broken implementation does: if adoptLease refused a Lease left by
// an earlier FencedLease of the name, both cases would end Degraded
// LeaseConflict with nothing granted nor adopted. If it adopted the Lease
// without its record (or the operator re-created it instead), the floor
// case would grant a pod a fence below the one recorded (and publish it),
// and the count of transitions would start again.
func TestLeaseOfAnEarlierFencedLeaseIsAdoptedWithItsFence(t *testing.T) {
	adopted := func(f *fixture, left *coordinationv1.Lease) {
		f.t.Helper()
		fl := f.get("db")
		f.g.Eventually(func(g Gomega) {
			l := &coordinationv1.Lease{}
			g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(left), l)).To(Succeed())
			g.Expect(l.UID).To(Equal(left.UID), "the left Lease is adopted, not re-created")
			g.Expect(l.OwnerReferences).To(HaveLen(1))
			g.Expect(metav1IsControlledBy(l, fl)).To(BeTrue(), "controlled by the new FencedLease")
			g.Expect(l.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	}

	t.Run("the grant goes on", func(t *testing.T) {
		f := newFixture(t)
		left, fence, a := leaveLease(f)
		f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())

		f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
		f.startManager(testenv.ManagerOptions{})
		pod, next := f.waitNewHolder("db", fence)
		f.g.Expect(pod).To(Equal("b"))
		adopted(f, left)
		l := f.lease("db")
		f.g.Expect(ptr.Deref(l.Spec.LeaseTransitions, 0)).To(Equal(int32(2)), "the count goes on from the left Lease's")
		st := f.get("db").Status
		f.g.Expect(st.Transitions).To(Equal(int32(2)))
		f.g.Expect(st.Fence).To(Equal(next))
		f.g.Expect(next).To(BeNumerically(">", fence))
		f.g.Eventually(func() string { role, _ := f.published("a"); return role }).
			WithTimeout(timeout).WithPolling(poll).Should(Equal(fencingv1alpha1.RoleStandby))
		f.g.Expect(f.holders()).To(Equal([]string{"b"}))
		f.g.Expect(f.checker.Published()).To(Equal([]int64{fence, next}))
	})

	t.Run("the fence is the floor", func(t *testing.T) {
		f := newFixture(t)
		left, fence, _ := leaveLease(f)
		const floor = "9000000000000000000"
		left.Annotations[fencingv1alpha1.AnnotationFence] = floor
		f.g.Expect(f.c.Update(f.ctx, left)).To(Succeed())

		f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
		f.startManager(testenv.ManagerOptions{})
		f.g.Eventually(func() string { return f.degraded("db") }).WithTimeout(timeout).WithPolling(poll).
			Should(MatchRegexp(`^FenceRegression: new fence \d+ is not greater than fence ` + floor + ` already published; no grant is made until it is$`))
		adopted(f, left)
		f.g.Eventually(f.holders).WithTimeout(timeout).WithPolling(poll).Should(BeEmpty(), "a's grant is ended")
		f.g.Consistently(func(g Gomega) {
			g.Expect(f.holders()).To(BeEmpty())
			l := f.lease("db")
			g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, floor), "no grant committed below the floor")
			g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(BeElementOf("revoked", "pending"))
			g.Expect(f.get("db").Status.Holder).To(BeNil())
		}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		f.g.Expect(f.checker.Published()).To(Equal([]int64{fence}))
	})
}
