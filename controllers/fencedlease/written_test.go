package fencedlease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestOwnStatusWriteIsReadThroughALaggingCache: the operator's FencedLease
// cache stops while a holds the lease, as an informer whose watch lags far
// behind. A takeover then records b's grant in the status, and the reconcile
// after it must publish b from that write rather than wait for the cache
// (it would wait forever here), and no status patch may conflict with the
// operator's own earlier one.
func TestOwnStatusWriteIsReadThroughALaggingCache(t *testing.T) {
	f := newFixture(t)
	var lag *testenv.Lag
	var conflicts atomic.Int32
	wrap := func(c client.Client) client.Client {
		lag = testenv.NewLag(c)
		return testenv.Intercept(lag, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
				if _, ok := obj.(*fencingv1alpha1.FencedLease); ok && apierrors.IsConflict(err) {
					conflicts.Add(1)
				}
				return err
			},
		})
	}
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, first := f.waitHolder("db")

	f.g.Eventually(func(g Gomega) {
		g.Expect(lag.Freeze(f.ctx, &fencingv1alpha1.FencedLeaseList{})).To(Succeed())
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(lag.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
		g.Expect(fl.Status.Fence).To(Equal(first))
		g.Expect(fl.ResourceVersion).To(Equal(f.get("db").ResourceVersion))
	}).WithTimeout(timeout).Should(Succeed())
	before := conflicts.Load()

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	pod, second := f.waitNewHolder("db", first)
	f.g.Expect(pod).To(Equal("b"))
	f.g.Expect(conflicts.Load()-before).To(BeZero(), "a status patch conflicted with the operator's own earlier write")
	f.g.Consistently(f.holders).WithTimeout(2 * time.Second).Should(Equal([]string{"b"}))
	f.g.Expect(f.get("db").Status.Fence).To(Equal(second))
}
