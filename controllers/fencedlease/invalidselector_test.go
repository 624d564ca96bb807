package fencedlease_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// invalidSelectors are selectors that the CRD's validation lets through
// (it refuses only an empty one) and that the operator cannot use, with
// what the operator's message says of each.
var invalidSelectors = []struct {
	name     string
	selector metav1.LabelSelector
	says     string
}{
	{"operator Exists with values", metav1.LabelSelector{MatchLabels: appLabels, MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpExists, Values: []string{"singleton"}}}},
		"values set must be empty for exists and does not exist"},
	{"operator In without values", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpIn}}},
		"for 'in', 'notin' operators, values set can't be empty"},
	{"unknown operator", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: "Equals", Values: []string{"singleton"}}}},
		`"Equals" is not a valid label selector operator`},
	{"label value with a space", metav1.LabelSelector{MatchLabels: map[string]string{"app": "single ton"}},
		`Invalid value: "single ton": a valid label must be`},
}

// expectInvalidSelector waits until the FencedLease reports Degraded
// InvalidSelector with a message that says what is wrong, and Ready False.
func (f *fixture) expectInvalidSelector(name, says string) {
	f.t.Helper()
	f.g.Eventually(func() string { return f.degraded(name) }).WithTimeout(timeout).WithPolling(poll).
		Should(And(HavePrefix(fencingv1alpha1.ReasonInvalidSelector+": spec.selector is invalid: "), ContainSubstring(says)))
	f.g.Expect(meta.IsStatusConditionTrue(f.get(name).Status.Conditions, fencingv1alpha1.ConditionReady)).To(BeFalse())
}

// versions returns the resourceVersions of the named pods.
func (f *fixture) versions(pods ...string) map[string]string {
	out := map[string]string{}
	for _, name := range pods {
		out[name] = f.pod(name).ResourceVersion
	}
	return out
}

// TestInvalidSelectorWritesNothing: a FencedLease whose selector the CRD
// lets through but that cannot be parsed (four ways) reports Degraded
// InvalidSelector with a message naming the problem, and the operator
// writes nothing of the grant: over three reconciles it creates no Lease
// and writes no pod (the two ready pods that a lenient reading of some of
// the selectors would select keep their resourceVersions, and nothing is
// published). A selector fixed then grants at once: the pods were eligible
// all along.
//
// With a grant held when the selector becomes invalid, nothing is written
// either: over three reconciles and more than a lease duration, neither
// the Lease (no renewal, no revocation) nor any pod changes. Once fixed,
// the holder is granted again.
//
// What a broken implementation does: if an invalid selector were read as
// selecting nothing, the new FencedLease's Lease would be created (a
// reconcile that grants nothing creates it empty), and a held grant would
// be revoked and its pods cleared; read leniently (ignoring what does not
// parse), a would be granted and published; if the operator went on to
// the grant step without the pods, the held grant would go on being
// renewed. Each of these writes a Lease or a pod that the test watches.
func TestInvalidSelectorWritesNothing(t *testing.T) {
	for _, tc := range invalidSelectors {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var begun atomic.Int32
			wrap := func(c client.Client) client.Client {
				return testenv.Intercept(c, interceptor.Funcs{Get: countBegins("db", &begun)})
			}
			f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
			f.readyPod("a", time.Hour)
			f.readyPod("b", time.Minute)
			pods := f.versions("a", "b")
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Selector = tc.selector })

			f.expectInvalidSelector("db", tc.says)
			f.reconciled("db", &begun, 3)
			err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, &coordinationv1.Lease{})
			f.g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a Lease was written: %v", err)
			f.g.Expect(f.versions("a", "b")).To(Equal(pods), "a pod was written")
			f.g.Expect(f.holders()).To(BeEmpty())
			st := f.get("db").Status
			f.g.Expect(st.Holder).To(BeNil())
			f.g.Expect(st.Fence).To(BeZero())
			held := meta.FindStatusCondition(st.Conditions, fencingv1alpha1.ConditionHeld)
			f.g.Expect(held).NotTo(BeNil())
			f.g.Expect(held.Status).To(Equal(metav1.ConditionFalse))
			f.g.Expect(held.Reason).To(Equal(fencingv1alpha1.ReasonInvalidSelector))
			f.expectInvalidSelector("db", tc.says)

			fl := f.get("db")
			base := fl.DeepCopy()
			fl.Spec.Selector = metav1.LabelSelector{MatchLabels: appLabels}
			f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
			pod, _ := f.waitHolder("db")
			f.g.Expect(pod).To(Equal("a"))
			f.g.Expect(f.degraded("db")).To(BeEmpty())
		})
	}

	t.Run("a held grant", func(t *testing.T) {
		f := newFixture(t)
		var begun atomic.Int32
		wrap := func(c client.Client) client.Client {
			return testenv.Intercept(c, interceptor.Funcs{Get: countBegins("db", &begun)})
		}
		f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
		f.readyPod("a", time.Hour)
		f.readyPod("b", time.Minute)
		f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
			fl.Spec.LeaseDurationSeconds = 3
			fl.Spec.RenewIntervalSeconds = ptr.To[int32](1)
		})
		pod, fence := f.waitHolder("db")
		f.g.Expect(pod).To(Equal("a"))
		f.g.Eventually(func() string { role, _ := f.published("b"); return role }).
			WithTimeout(timeout).WithPolling(poll).Should(Equal(fencingv1alpha1.RoleStandby))

		invalid := invalidSelectors[0]
		fl := f.get("db")
		base := fl.DeepCopy()
		fl.Spec.Selector = invalid.selector
		f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
		f.expectInvalidSelector("db", invalid.says)
		// The reconcile that set Degraded ended nothing: a's grant is as it
		// was, held and published. No reconcile of db runs beside another,
		// so what is stored now is what every later reconcile must leave
		// alone.
		lease := f.lease("db")
		f.g.Expect(lease.Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationState, "held"))
		f.g.Expect(lease.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fence, 10)))
		f.g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).To(Equal("a"))
		f.g.Expect(ptr.Deref(lease.Spec.LeaseTransitions, 0)).To(Equal(int32(1)))
		f.g.Expect(f.holders()).To(Equal([]string{"a"}))
		role, published := f.published("a")
		f.g.Expect([]string{role, published}).To(Equal([]string{fencingv1alpha1.RoleHolder, strconv.FormatInt(fence, 10)}))
		role, _ = f.published("b")
		f.g.Expect(role).To(Equal(fencingv1alpha1.RoleStandby))
		pods := map[string]*corev1.Pod{"a": f.pod("a"), "b": f.pod("b")}
		f.reconciled("db", &begun, 3)
		f.g.Consistently(func(g Gomega) {
			l := &coordinationv1.Lease{}
			g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(lease), l)).To(Succeed())
			g.Expect(l.ResourceVersion).To(Equal(lease.ResourceVersion), "the Lease was written")
			for name, p := range pods {
				now := &corev1.Pod{}
				g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(p), now)).To(Succeed())
				g.Expect(now.ResourceVersion).To(Equal(p.ResourceVersion), "pod %s was written", name)
			}
		}).WithTimeout(4 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		f.reconciled("db", &begun, 1)
		f.g.Expect(f.lease("db").ResourceVersion).To(Equal(lease.ResourceVersion), "the Lease was written")
		f.g.Expect(f.versions("a", "b")).To(Equal(map[string]string{"a": pods["a"].ResourceVersion, "b": pods["b"].ResourceVersion}))

		fl = f.get("db")
		base = fl.DeepCopy()
		fl.Spec.Selector = metav1.LabelSelector{MatchLabels: appLabels}
		f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
		pod, next := f.waitHolder("db")
		f.g.Expect(pod).To(Equal("a"))
		f.g.Expect(next).To(BeNumerically(">=", fence))
		f.g.Eventually(func() string { return f.degraded("db") }).WithTimeout(timeout).WithPolling(poll).Should(BeEmpty())
	})
}
