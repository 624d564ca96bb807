package fencedlease

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/pace"
)

// saturatedPace is a pace whose renewals took all of one worker's time
// for the last minute, as an operator past its capacity.
func saturatedPace() *pace.Pace {
	p := pace.New(1)
	now := time.Now().Add(-time.Minute)
	for i := range 600 {
		p.Worked(now.Add(time.Duration(i)*100*time.Millisecond), 100*time.Millisecond, true)
	}
	return p
}

// idlePace is a pace that has measured half a minute of an idle operator.
func idlePace() *pace.Pace {
	p := pace.New(1)
	now := time.Now().Add(-30 * time.Second)
	for i := range 300 {
		p.Worked(now.Add(time.Duration(i)*100*time.Millisecond), time.Millisecond, false)
	}
	return p
}

// TestSaturatedOperatorWritesOnlyTheStatusOfANewFencedLease: a FencedLease
// that never held, met by a saturated operator, gets Held=False
// WaitingForCapacity and nothing else: no finalizer, no Lease. Once the
// operator has room again it is reconciled as any other.
func TestSaturatedOperatorWritesOnlyTheStatusOfANewFencedLease(t *testing.T) {
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", Generation: 1},
		Spec:       fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	c := fakeAPI(t, fl)
	r := &Reconciler{Client: c, APIReader: c, Clock: clock.RealClock{}}
	r.once.Do(r.defaults)
	r.pace.pace = saturatedPace()
	if !r.pace.pace.Saturated() {
		t.Fatalf("the pace is not saturated: %+v", r.pace.pace.Status())
	}
	ctx, key := context.Background(), types.NamespacedName{Namespace: "n", Name: "db"}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 15*time.Second {
		t.Errorf("RequeueAfter = %s, want the lease duration", res.RequeueAfter)
	}
	got := &fencingv1alpha1.FencedLease{}
	if err := c.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	held := meta.FindStatusCondition(got.Status.Conditions, fencingv1alpha1.ConditionHeld)
	if held == nil || held.Status != metav1.ConditionFalse || held.Reason != fencingv1alpha1.ReasonWaitingForCapacity {
		t.Errorf("Held = %+v, want False WaitingForCapacity", held)
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("finalizers %v, want none while waiting", got.Finalizers)
	}
	if err := c.Get(ctx, key, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease: %v, want none while waiting", err)
	}
	before := got.ResourceVersion
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, got); err != nil || got.ResourceVersion != before {
		t.Errorf("a second look wrote again: resourceVersion %s -> %s (%v)", before, got.ResourceVersion, err)
	}

	// A restarted operator, its load not measured yet: a FencedLease the
	// previous process left waiting goes on waiting, without a write.
	r.pace.pace = pace.New(1)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, got); err != nil || got.ResourceVersion != before || len(got.Finalizers) != 0 {
		t.Errorf("before the load is measured: resourceVersion %s -> %s, finalizers %v (%v), want it waiting untouched",
			before, got.ResourceVersion, got.Finalizers, err)
	}

	// Room again, measured: the finalizer first, as for any FencedLease.
	r.pace.pace = idlePace()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, got); err != nil || len(got.Finalizers) != 1 {
		t.Errorf("with room again: finalizers %v (%v), want the operator's", got.Finalizers, err)
	}
}

// TestRestartedOperatorGrantsAFencedLeaseLeftWaiting: a FencedLease that a
// previous process left waiting for capacity is all a restarted, idle
// operator has to reconcile. Its looks must count as the time the pace
// measures: once the load is measured (two windows), the FencedLease goes
// on to its finalizer, and its looks come no later than that.
func TestRestartedOperatorGrantsAFencedLeaseLeftWaiting(t *testing.T) {
	fl := &fencingv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "db", Generation: 1},
		Spec: fencingv1alpha1.FencedLeaseSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			LeaseDurationSeconds: 3600},
	}
	meta.SetStatusCondition(&fl.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionHeld, Status: metav1.ConditionFalse,
		Reason: fencingv1alpha1.ReasonWaitingForCapacity, Message: "written by the process before"})
	c := fakeAPI(t, fl)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	r := &Reconciler{Client: c, APIReader: c, Clock: clk}
	ctx, key := context.Background(), types.NamespacedName{Namespace: "n", Name: "db"}
	var waited time.Duration
	for look := 0; ; look++ {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		got := &fencingv1alpha1.FencedLease{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if len(got.Finalizers) == 1 {
			t.Logf("on its way after %d looks, %s", look+1, waited)
			if waited > pace.MeasureTime+time.Second {
				t.Errorf("waited %s, want no longer than the %s the pace measures", waited, pace.MeasureTime)
			}
			return
		}
		if look == 10 || res.RequeueAfter <= 0 {
			t.Fatalf("still waiting after %d looks, %s (next look in %s): the idle operator never measures its load", look+1, waited, res.RequeueAfter)
		}
		clk.SetTime(clk.Now().Add(res.RequeueAfter))
		waited += res.RequeueAfter
	}
}

// testScheme has the built-in kinds and FencedLeases, for fake clients.
func testScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fencingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
