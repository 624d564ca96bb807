package fencedlease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/internal/record"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// heartbeat is a heartbeat in the test's namespace (the manager's caches
// see that one only), renewed every 250 ms, with a refresh longer than any
// test: a vouched grant's Lease is written only when the grant changes.
func (f *fixture) heartbeat() *fencedlease.Heartbeat {
	return &fencedlease.Heartbeat{Namespace: f.ns, Name: "heartbeat", Interval: 250 * time.Millisecond, Refresh: time.Hour, Identity: "test"}
}

// quietLease is a FencedLease of 2 s leases (the heartbeat vouches for
// leases of four of its intervals or more) with two ready pods.
func (f *fixture) quietLease(takeover fencingv1alpha1.TakeoverPolicy) {
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 2
		fl.Spec.Takeover = takeover
	})
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
}

// pod reads a pod of the test's namespace.
func (f *fixture) pod(name string) *corev1.Pod {
	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, p)).To(Succeed())
	return p
}

// A grant nothing happens to costs no write of its own: its Lease stays as
// the commit left it, vouched for by the heartbeat, through several lease
// durations, while the heartbeat is renewed four times a second. The Lease
// says so to a reader of the Lease alone: it names the heartbeat and the
// lease duration, and its own duration covers the refresh interval.
func TestQuietLeaseCostsNoWrite(t *testing.T) {
	f := newFixture(t)
	hb := f.heartbeat()
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Heartbeat: hb}})
	f.quietLease(fencingv1alpha1.TakeoverSafe)
	pod, fence := f.waitHolder("db")

	var l *coordinationv1.Lease
	f.g.Eventually(func() string {
		l = f.lease("db")
		return l.Annotations[fencingv1alpha1.LeaseAnnotationVouchedBy]
	}).WithTimeout(timeout).WithPolling(poll).Should(Equal(f.ns + "/heartbeat"))
	f.g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationLeaseDuration]).To(Equal("2"))
	f.g.Expect(l.Spec.LeaseDurationSeconds).To(Equal(ptr.To(int32(3602))))
	beats := f.beats(hb)

	f.g.Consistently(func() string { return f.lease("db").ResourceVersion }).
		WithTimeout(6*time.Second).WithPolling(100*time.Millisecond).Should(Equal(l.ResourceVersion), "no write to the Lease of a quiet grant")
	holder, now := f.waitHolder("db")
	f.g.Expect(holder).To(Equal(pod))
	f.g.Expect(now).To(Equal(fence), "the grant lasted three lease durations on the heartbeat alone")
	f.g.Expect(f.beats(hb)).To(BeNumerically(">=", beats+12), "the heartbeat was renewed meanwhile")
}

// beats reads how often the heartbeat was renewed.
func (f *fixture) beats(hb *fencedlease.Heartbeat) int64 {
	l := &coordinationv1.Lease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: hb.Namespace, Name: hb.Name}, l)).To(Succeed())
	f.g.Expect(l.Annotations).To(HaveKey(fencingv1alpha1.HeartbeatAnnotationBeats))
	return record.BeatsOf(l.Annotations)
}

// versionsOf watches the Lease of that name from now on and records every
// version, in order.
func (f *fixture) versionsOf(name string) func() []coordinationv1.Lease {
	f.t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	f.g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(f.ctx, &coordinationv1.LeaseList{}, client.InNamespace(f.ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.t.Cleanup(w.Stop)
	var mu sync.Mutex
	var seen []coordinationv1.Lease
	go func() {
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted {
				mu.Lock()
				seen = append(seen, *l.DeepCopy())
				mu.Unlock()
			}
		}
	}()
	return func() []coordinationv1.Lease {
		mu.Lock()
		defer mu.Unlock()
		return append([]coordinationv1.Lease(nil), seen...)
	}
}

// With takeover Safe, the next pod is granted a lease duration after the
// last renewal of the old grant, and the heartbeat's renewals are its
// renewals: the grant to b comes no earlier than the last renewal of the
// heartbeat written before the revocation, plus the lease duration. A
// count from the grant's own last write (its commit, seconds earlier)
// would grant b too soon.
func TestSafeWaitCountsTheHeartbeat(t *testing.T) {
	f := newFixture(t)
	hb := f.heartbeat()
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Heartbeat: hb}})
	beats, leases := f.versionsOf(hb.Name), f.versionsOf("db")
	f.quietLease(fencingv1alpha1.TakeoverSafe)
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	time.Sleep(3 * time.Second) // the heartbeat alone renews the grant

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, f.pod("a"))).To(Succeed())
	_, next := f.waitNewHolder("db", fence)

	// The revocation, and the grant to b, as the Lease's versions show them.
	var revokedAt int64
	var grantedB *coordinationv1.Lease
	for _, l := range leases() {
		rv := record.FenceOf(l.ResourceVersion)
		if l.Annotations[fencingv1alpha1.LeaseAnnotationState] == fencingv1alpha1.LeaseStateRevoked && revokedAt == 0 {
			revokedAt = rv
		}
		if ptr.Deref(l.Spec.HolderIdentity, "") == "b" && grantedB == nil {
			grantedB = l.DeepCopy()
		}
	}
	f.g.Expect(revokedAt).NotTo(BeZero(), "a's grant was revoked before b's")
	f.g.Expect(grantedB).NotTo(BeNil())
	var last time.Time
	for _, b := range beats() {
		if record.FenceOf(b.ResourceVersion) < revokedAt {
			last = b.Spec.RenewTime.Time
		}
	}
	f.g.Expect(last).NotTo(BeZero(), "the heartbeat was renewed while a held")
	gap := grantedB.Spec.AcquireTime.Sub(last)
	t.Logf("b granted with fence %d, %s after the heartbeat's last renewal before the revocation", next, gap.Round(time.Millisecond))
	f.g.Expect(gap).To(BeNumerically(">=", 2*time.Second), "b granted before a's grant expired by its heartbeat")
}

// A heartbeat that cannot be renewed no longer vouches, and no grant is
// lost for it: a few intervals without a renewal and the watchdog looks at
// the grants it vouched for, which are renewed on their own Leases from
// then on (nothing else would look at them before their refresh, an hour
// away, and they would expire). Once the heartbeat is renewed again, the
// next renewal puts the grant back under it. The fence never changes.
func TestFailingHeartbeatFallsBackToRenewals(t *testing.T) {
	f := newFixture(t)
	hb := f.heartbeat()
	var failing atomic.Bool
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Heartbeat: hb, WrapClient: failBeats(hb, &failing)}})
	f.quietLease(fencingv1alpha1.TakeoverSafe)
	pod, fence := f.waitHolder("db")
	vouchedBy := func() string { return f.lease("db").Annotations[fencingv1alpha1.LeaseAnnotationVouchedBy] }
	f.g.Eventually(vouchedBy).WithTimeout(timeout).WithPolling(poll).Should(Equal(f.ns + "/heartbeat"))

	failing.Store(true)
	f.g.Eventually(vouchedBy).WithTimeout(timeout).WithPolling(poll).Should(BeEmpty(), "renewed on its own Lease")
	renewed := f.lease("db").Spec.RenewTime.Time
	f.g.Eventually(func() time.Time { return f.lease("db").Spec.RenewTime.Time }).WithTimeout(timeout).WithPolling(poll).
		Should(BeTemporally(">", renewed), "and renewed again")

	failing.Store(false)
	f.g.Eventually(vouchedBy).WithTimeout(timeout).WithPolling(poll).Should(Equal(f.ns+"/heartbeat"), "back under the heartbeat")
	holder, now := f.waitHolder("db")
	f.g.Expect(holder).To(Equal(pod))
	f.g.Expect(now).To(Equal(fence), "the grant outlived the failing heartbeat")
}

// failBeats makes every renewal of the heartbeat fail while failing is set.
func failBeats(hb *fencedlease.Heartbeat, failing *atomic.Bool) func(client.Client) client.Client {
	return func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if _, ok := obj.(*coordinationv1.Lease); ok && obj.GetName() == hb.Name && failing.Load() {
					return errors.New("the heartbeat cannot be written (test)")
				}
				return cl.Update(ctx, obj, opts...)
			},
		})
	}
}

// A restarted operator keeps the grants its heartbeat vouched for: it
// counts them as freshly renewed when it first sees them, renews the
// heartbeat, and grants nothing anew.
func TestRestartKeepsVouchedGrants(t *testing.T) {
	f := newFixture(t)
	hb := f.heartbeat()
	first := f.startManager(testenv.ManagerOptions{Options: setup.Options{Heartbeat: hb}})
	f.quietLease(fencingv1alpha1.TakeoverSafe)
	pod, fence := f.waitHolder("db")
	first.Crash()
	first.Wait()
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Heartbeat: hb}})
	f.g.Consistently(func() int64 { _, n := f.waitHolder("db"); return n }).WithTimeout(5*time.Second).WithPolling(200*time.Millisecond).
		Should(Equal(fence), "no grant anew after the restart")
	holder, _ := f.waitHolder("db")
	f.g.Expect(holder).To(Equal(pod))
}

// A grant that the store brings back from the past is ended, although the
// heartbeat vouches for it and nothing else would write its Lease for
// minutes. The record says a fence far above the Lease's version, as after
// an etcd restore: the held grant is revoked at once, with Degraded
// FenceRegression and a Warning event, and nobody is granted while the
// store's revision is below the floor. Without the check its healthy holder
// would keep a grant whose every fenced write a destination refuses.
func TestRestoredGrantBelowTheFloorIsEnded(t *testing.T) {
	f := newFixture(t)
	hb := f.heartbeat()
	f.startManager(testenv.ManagerOptions{Options: setup.Options{Heartbeat: hb}})
	f.quietLease(fencingv1alpha1.TakeoverImmediate)
	_, fence := f.waitHolder("db")
	f.g.Eventually(func() string {
		return f.lease("db").Annotations[fencingv1alpha1.LeaseAnnotationVouchedBy]
	}).WithTimeout(timeout).WithPolling(poll).ShouldNot(BeEmpty())

	fl := f.get("db")
	base := fl.DeepCopy()
	fl.Status.Fence = 9000000000000000000
	f.g.Expect(f.c.Status().Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())

	f.g.Eventually(func() string {
		c := meta.FindStatusCondition(f.get("db").Status.Conditions, fencingv1alpha1.ConditionDegraded)
		if c == nil || c.Status != metav1.ConditionTrue {
			return ""
		}
		return c.Reason
	}).WithTimeout(timeout).WithPolling(poll).Should(Equal(fencingv1alpha1.ReasonFenceRegression))
	f.g.Eventually(f.holders).WithTimeout(timeout).Should(BeEmpty(), "the restored grant was ended")
	f.g.Expect(f.lease("db").Annotations[fencingv1alpha1.LeaseAnnotationState]).To(BeElementOf("revoked", "pending"))
	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElement(fencingv1alpha1.EventFenceRegression))
	f.g.Consistently(f.holders).WithTimeout(3 * time.Second).Should(BeEmpty())
	f.g.Expect(f.checker.Published()).To(Equal([]int64{fence}), "no fence was published after the regression")
}
