package fencedlease_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// loseStatusPatches returns a client wrapper under which every status patch
// of a FencedLease that records the handoff request as handled is lost, as
// a request that never reached the API server: nothing is applied and the
// operator gets an error, while losing is set. Each lost patch is counted
// in lost; once says that only the first is lost.
func loseStatusPatches(request string, losing *atomic.Bool, once bool, lost *atomic.Int32) func(client.Client) client.Client {
	records := []byte(`"lastHandledHandoffAt":"` + request + `"`)
	return func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*fencingv1alpha1.FencedLease); ok && sub == "status" && losing.Load() {
					data, err := patch.Data(obj)
					if err != nil {
						return err
					}
					if bytes.Contains(data, records) {
						if once {
							losing.Store(false)
						}
						lost.Add(1)
						return apierrors.NewServiceUnavailable("the status patch was lost on its way to the API server")
					}
				}
				return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
}

// TestLostHandoffStatusPatchHandsOverOnce: a handoff is requested from a to
// b, and the status patch of the reconcile that starts it, the one that
// records the request as handled, is lost (the request never reaches the
// API server). Under Immediate takeover one patch is lost: the grant to b
// is written and committed, and the status still names a and no handled
// request. Under Safe every patch recording the request is lost from the
// revocation of a until b's grant is committed, a handoff later on the
// Lease than the request. In both, the Lease write that started the
// handoff carried fencedlease.io/handoff: <request> in the same CAS, so
// the next reconcile records the request instead of handing over again:
// the grant moves exactly once (transitions 2, two fences ever published,
// one Rotated Event), b keeps it, and the status ends up recording the
// request.
//
// What a broken implementation does: if handoffRequest did not read the
// Lease's mark (or the grant and revoke writes did not carry it), the
// reconcile after the lost patch would see the request still pending, with
// b holding and a eligible, and hand over again, from b back to a: a third
// fence, a published again, transitions 3 and a second Rotated Event.
func TestLostHandoffStatusPatchHandsOverOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		takeover fencingv1alpha1.TakeoverPolicy
		// once: only the first patch is lost; otherwise every one until
		// b's grant is committed on the Lease.
		once bool
		// lease is the lease duration. A reconcile whose status patch
		// failed is retried after up to 5 s (the controller's backoff), and
		// renews nothing meanwhile: a lease shorter than that would expire
		// b's grant, which is then granted again with a new fence, a
		// re-grant and no handoff. So the Safe case, whose patches fail
		// for a lease duration, leases for 10 s.
		lease int32
	}{
		{"takeover Immediate, one patch lost", fencingv1alpha1.TakeoverImmediate, true, 3},
		{"takeover Safe, patches lost until the new grant is committed", fencingv1alpha1.TakeoverSafe, false, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			const request = "2026-12-01T10:00:00Z"
			var losing atomic.Bool
			var lost atomic.Int32
			f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: loseStatusPatches(request, &losing, tc.once, &lost)}})
			f.readyPod("a", time.Hour)
			b := f.readyPod("b", time.Minute)
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
				fl.Spec.Takeover = tc.takeover
				fl.Spec.LeaseDurationSeconds = tc.lease
				fl.Spec.RenewIntervalSeconds = ptr.To[int32](1)
			})
			pod, first := f.waitHolder("db")
			f.g.Expect(pod).To(Equal("a"))
			f.g.Expect(f.get("db").Status.Transitions).To(Equal(int32(1)))

			losing.Store(true)
			fl := f.get("db")
			base := fl.DeepCopy()
			fl.Annotations = map[string]string{fencingv1alpha1.AnnotationHandoffRequestedAt: request}
			f.g.Expect(f.c.Patch(f.ctx, fl, client.MergeFrom(base))).To(Succeed())
			f.g.Eventually(lost.Load).WithTimeout(timeout).Should(BeNumerically(">=", 1), "the patch recording the handoff was lost")

			if !tc.once {
				// The patches are lost until b's grant is committed: the
				// reconciles that wait for a's grant to expire, and the one
				// that grants b, record nothing.
				f.g.Eventually(func(g Gomega) {
					l := f.lease("db")
					g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal("b"))
					g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationState, "held"))
					g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationHolderUID, string(b.UID)))
				}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
				f.g.Expect(f.get("db").Status.LastHandledHandoffAt).To(BeEmpty(), "no status patch recording the request got through")
				losing.Store(false)
			}

			pod, second := f.waitNewHolder("db", first)
			f.g.Expect(pod).To(Equal("b"))
			f.g.Eventually(func() string { return f.get("db").Status.LastHandledHandoffAt }).
				WithTimeout(timeout).WithPolling(poll).Should(Equal(request), "the status records the request in the end")
			f.g.Expect(f.lease("db").Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationHandoff, request))

			// Handed over once: b keeps the grant it got, over renewals.
			f.g.Consistently(func(g Gomega) {
				st := f.get("db").Status
				g.Expect(st.Holder).NotTo(BeNil())
				g.Expect(st.Holder.PodName).To(Equal("b"))
				g.Expect(st.Fence).To(Equal(second))
				g.Expect(st.Transitions).To(Equal(int32(2)))
				l := f.lease("db")
				g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal("b"))
				g.Expect(l.Annotations).To(HaveKeyWithValue(fencingv1alpha1.LeaseAnnotationState, "held"))
				g.Expect(ptr.Deref(l.Spec.LeaseTransitions, 0)).To(Equal(int32(2)))
				g.Expect(f.holders()).To(Equal([]string{"b"}))
			}).WithTimeout(5 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
			f.g.Expect(f.checker.Published()).To(Equal([]int64{first, second}))
			rotated := 0
			for _, e := range f.events("db") {
				f.g.Expect(e).NotTo(Equal(fencingv1alpha1.EventHandoffRefused))
				if e == fencingv1alpha1.EventRotated {
					rotated++
				}
			}
			f.g.Expect(rotated).To(Equal(1), "one handoff, one Rotated Event")
			if tc.once {
				f.g.Expect(lost.Load()).To(Equal(int32(1)))
			}
		})
	}
}
