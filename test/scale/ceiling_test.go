//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// ceiling is how fast this machine's API server and etcd take the writes of
// a first grant, measured in the same run as the operator, before it
// starts: the operator's cold start is reported as a share of it.
type ceiling struct {
	// Grants is how many first grants' writes were made; Workers how many
	// at once (the operator's concurrent reconciles).
	Grants  int `json:"grants"`
	Workers int `json:"workers"`
	// Writes and Seconds: every write of the mix, and the time they took.
	Writes          int     `json:"writes"`
	Seconds         float64 `json:"seconds"`
	WritesPerSecond float64 `json:"writes_per_s"`
	// Failed counts the writes the API server refused (none expected), and
	// FirstError says why the first was.
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
}

// measureCeiling makes the writes of n first grants on workers goroutines,
// as fast as the API server takes them, on objects of their own in
// namespace ns: the pods of pods(i) (two, existing; an annotation of no
// meaning to the operator is patched on them), a Lease and a FencedLease
// per grant (created beforehand and deleted after, outside the measured
// time, so that the operator, started afterwards, never sees them).
func measureCeiling(ctx context.Context, c client.Client, ns string, n, workers int, pods func(i int) (string, string, string)) (ceiling, error) {
	res := ceiling{Grants: n, Workers: workers}
	var createErr atomic.Value
	parallel(n, workers, func(i int) {
		fl := testenv.FencedLease(ns, fmt.Sprintf("ceiling-%d", i), map[string]string{"app": "nothing-matches-this"}, nil)
		if err := c.Create(ctx, fl); err != nil {
			createErr.Store(err)
		}
	})
	if err, _ := createErr.Load().(error); err != nil {
		return res, fmt.Errorf("create the ceiling's FencedLeases: %w", err)
	}
	var writes, failed atomic.Int64
	var firstErr atomic.Value
	do := func(err error) {
		writes.Add(1)
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
		}
	}
	start := time.Now()
	parallel(n, workers, func(i int) {
		podNS, a, b := pods(i)
		mark := func(pod, role string) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.fencedlease.io/ceiling":"%s-%d"}}}`, role, i)
			return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: pod}}, client.RawPatch(types.MergePatchType, []byte(patch)))
		}
		do(mark(a, "standby"))
		do(mark(b, "standby"))
		now := metav1.NewMicroTime(time.Now())
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ceiling-%d", i)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a), LeaseDurationSeconds: ptr.To(int32(15)),
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(int32(1))}}
		err := c.Create(ctx, l)
		do(err)
		if err == nil {
			l.Annotations = map[string]string{"bench.fencedlease.io/ceiling": "committed"}
			do(c.Update(ctx, l))
		} else {
			do(err)
		}
		fl := &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ceiling-%d", i)}}
		do(c.Patch(ctx, fl, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"bench.fencedlease.io/ceiling":"finalizer"}}}`))))
		status := fmt.Sprintf(`{"status":{"fence":%d,"holder":{"podName":%q,"podUID":"00000000-0000-0000-0000-%012d"}}}`, i+1, a, i)
		do(c.Status().Patch(ctx, fl, client.RawPatch(types.MergePatchType, []byte(status))))
		do(mark(a, "holder"))
		for k := range 3 {
			do(c.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "ceiling-"},
				EventTime: metav1.NewMicroTime(time.Now()), ReportingController: "fencedlease.io/bench",
				ReportingInstance: "bench", Action: "Grant", Reason: fmt.Sprintf("Ceiling%d", k), Type: corev1.EventTypeNormal,
				Regarding: corev1.ObjectReference{Kind: "FencedLease", Namespace: ns, Name: fl.Name}}))
		}
	})
	elapsed := time.Since(start)
	res.Writes, res.Failed, res.Seconds = int(writes.Load()), int(failed.Load()), elapsed.Seconds()
	res.WritesPerSecond = float64(res.Writes) / res.Seconds
	res.FirstError, _ = firstErr.Load().(string)
	if err := c.DeleteAllOf(ctx, &fencingv1alpha1.FencedLease{}, client.InNamespace(ns)); err != nil {
		return res, fmt.Errorf("delete the ceiling's FencedLeases: %w", err)
	}
	if err := c.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(ns)); err != nil {
		return res, fmt.Errorf("delete the ceiling's Leases: %w", err)
	}
	return res, nil
}

// share is the operator's cold start as a share of the ceiling: the
// writes a second it made (first grants a second × writes per first grant)
// over the writes a second the API server took in the same mix.
func share(leases int, coldStart float64, writesPerGrant map[string]float64, c ceiling) float64 {
	if coldStart <= 0 || c.WritesPerSecond <= 0 {
		return 0
	}
	return float64(leases) / coldStart * sum(writesPerGrant) / c.WritesPerSecond
}
