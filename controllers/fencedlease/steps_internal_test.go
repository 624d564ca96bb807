package fencedlease

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dto "github.com/prometheus/client_model/go"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// TestTheStepsOfAGrantAreTimed: the reconcile that grants records how long
// each of its steps took, once each, under the action Grant; a slow Lease
// write is counted in the lease step and a slow status patch in the status
// step: that is what tells, in a benchmark or in production, where a
// takeover waits. (Only lower bounds are asserted: a loaded machine makes
// any step slower, never faster.)
func TestTheStepsOfAGrantAreTimed(t *testing.T) {
	const slowLease, slowStatus = 60 * time.Millisecond, 40 * time.Millisecond
	key := types.NamespacedName{Namespace: "n", Name: "timed"}
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "timed", Generation: 1, Finalizers: []string{fencingv1alpha1.Finalizer}},
		Spec:       fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	c, r := grantWorld(t, fl, runningPod("a", time.Hour))
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				time.Sleep(slowLease)
			}
			return cl.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*fencingv1alpha1.FencedLease); ok && sub == "status" {
				time.Sleep(slowStatus)
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	before := map[string]*dto.Histogram{}
	for _, st := range stepNames {
		before[st] = stepHistogram(t, st, "Grant")
	}
	reconcileUntilCommitted(t, r, c, key, 0)

	grew := func(st string) (n uint64, sum float64) {
		h := stepHistogram(t, st, "Grant")
		return h.GetSampleCount() - before[st].GetSampleCount(), h.GetSampleSum() - before[st].GetSampleSum()
	}
	for _, st := range stepNames {
		if n, _ := grew(st); n != 1 {
			t.Errorf("step %s of the grant: %d observations, want 1", st, n)
		}
	}
	if _, sum := grew("lease"); sum < slowLease.Seconds() {
		t.Errorf("step lease of the grant took %.1f ms, less than its Lease write's %s", 1000*sum, slowLease)
	}
	if _, sum := grew("status"); sum < slowStatus.Seconds() {
		t.Errorf("step status of the grant took %.1f ms, less than its status patch's %s", 1000*sum, slowStatus)
	}
}

func stepHistogram(t *testing.T, step, action string) *dto.Histogram {
	t.Helper()
	m := &dto.Metric{}
	if err := stepSeconds.WithLabelValues(step, action).(interface{ Write(*dto.Metric) error }).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}
