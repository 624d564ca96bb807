package fencedlease_test

import (
	"bytes"
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

// TestReplicaThatMissedARecreationClearsNothing: replica 2's FencedLease
// cache saw db deleted and never saw it created again. To replica 2, db is
// gone, so it looks for pods of db to clear; they are the pods of the new
// db, whose holder replica 1 has published. Replica 2 must not write them:
// the API server says that a FencedLease of that name exists.
func TestReplicaThatMissedARecreationClearsNothing(t *testing.T) {
	f := newFixture(t)
	var lag *testenv.Lag
	var clears atomic.Int32
	wrap := func(c client.Client) client.Client {
		lag = testenv.NewLag(c)
		return testenv.Intercept(lag, interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if data, err := patch.Data(obj); err == nil && bytes.Contains(data, []byte(`"`+fencingv1alpha1.LabelLease+`":null`)) {
					clears.Add(1)
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		})
	}
	f.startManager(testenv.ManagerOptions{})
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	_, first := f.waitHolder("db")

	old := f.get("db")
	f.g.Expect(f.c.Delete(f.ctx, old)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		err := f.c.Get(f.ctx, client.ObjectKeyFromObject(old), &fencingv1alpha1.FencedLease{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		g.Expect(f.holders()).To(BeEmpty())
		list := &fencingv1alpha1.FencedLeaseList{}
		g.Expect(lag.List(f.ctx, list, client.InNamespace(f.ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "replica 2 has seen the deletion")
	}).WithTimeout(timeout).Should(Succeed())
	f.g.Expect(lag.Freeze(f.ctx, &fencingv1alpha1.FencedLeaseList{})).To(Succeed())
	before := clears.Load()

	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	holder, second := f.waitHolder("db")
	f.g.Expect(second).To(BeNumerically(">", first))
	for range 3 {
		f.poke("db") // both replicas look at db
		time.Sleep(300 * time.Millisecond)
	}
	f.g.Consistently(func() int32 { return clears.Load() - before }).WithTimeout(2*time.Second).Should(BeZero(),
		"replica 2 cleared pods of the FencedLease created again")
	f.g.Expect(f.holders()).To(Equal([]string{holder}))
	_, fence := f.waitHolder("db")
	f.g.Expect(fence).To(Equal(second), "the holder kept its grant")
}
