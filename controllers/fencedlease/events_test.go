package fencedlease_test

import (
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// podEvents lists "reason: note" of the Events regarding a pod, whose
// related object is the FencedLease.
func (f *fixture) podEvents(pod, lease string) []string {
	var list eventsv1.EventList
	f.g.Expect(f.c.List(f.ctx, &list, client.InNamespace(f.ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == pod && e.Related != nil && e.Related.Kind == "FencedLease" && e.Related.Name == lease {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// TestEventsOnTransitionsOnly: a grant is one Event on the FencedLease and
// one on the pod; renewals add none; a requested handoff is carried out
// once, under Safe takeover, with Rotated on the FencedLease, HolderLost on
// the old holder and HolderGranted on the new one.
func TestEventsOnTransitionsOnly(t *testing.T) {
	f := newFixture(t)
	f.startManager(testenv.ManagerOptions{})
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 3
		fl.Spec.RenewIntervalSeconds = ptr.To[int32](1)
	})
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	granted := "HolderGranted: Holds FencedLease db with fence " + strconv.FormatInt(fence, 10)
	f.g.Eventually(func() []string { return f.podEvents("a", "db") }).WithTimeout(timeout).Should(Equal([]string{granted}))
	renewed := f.lease("db").Spec.RenewTime.Time
	// Three renewals later: still one Event on each.
	f.g.Consistently(func() []string { return f.events("db") }).WithTimeout(3500 * time.Millisecond).Should(Equal([]string{fencingv1alpha1.EventGranted}))
	f.g.Expect(f.lease("db").Spec.RenewTime.Time).To(BeTemporally(">=", renewed.Add(2*time.Second)), "the operator renewed meanwhile")
	f.g.Expect(f.podEvents("a", "db")).To(Equal([]string{granted}))
	f.g.Expect(f.podEvents("b", "db")).To(BeEmpty())

	fl := f.get("db")
	base := fl.DeepCopy()
	fl.Annotations = map[string]string{fencingv1alpha1.AnnotationHandoffRequestedAt: "2026-12-01T10:00:00Z"}
	f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
	pod, fence2 := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("b"))
	f.g.Expect(f.get("db").Status.LastHandledHandoffAt).To(Equal("2026-12-01T10:00:00Z"))
	f.g.Expect(f.lease("db").Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationHandoff, "2026-12-01T10:00:00Z"),
		"the revoke carried the request, so that it is carried out once")
	f.g.Eventually(func() []string { return f.podEvents("b", "db") }).WithTimeout(timeout).
		Should(Equal([]string{"HolderGranted: Holds FencedLease db with fence " + strconv.FormatInt(fence2, 10)}))
	f.g.Eventually(func() []string { return f.podEvents("a", "db") }).WithTimeout(timeout).Should(ConsistOf(granted,
		"HolderLost: No longer holds FencedLease db: its grant with fence "+strconv.FormatInt(fence, 10)+" ended (handoff requested)"))
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ConsistOf(
		fencingv1alpha1.EventGranted, fencingv1alpha1.EventRotated, fencingv1alpha1.EventGranted))
	// Handled once: b keeps the lease, and nothing more happens.
	f.g.Consistently(func() string { p, _ := f.waitHolder("db"); return p }).WithTimeout(4 * time.Second).Should(Equal("b"))
	f.g.Expect(f.events("db")).To(HaveLen(3))
}
