package fencedlease

import (
	"context"
	"testing"
	"time"
)

// The steps run at once: each waits for the other to have started, which
// steps run one after the other never do.
func TestConcurrentlyRunsTheStepsAtOnce(t *testing.T) {
	r := &Reconciler{}
	a, b := make(chan struct{}), make(chan struct{})
	var aSaw, bSaw bool
	wait := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(30 * time.Second):
			return false
		}
	}
	r.concurrently(context.Background(),
		func(context.Context) { close(a); aSaw = wait(b) },
		func(context.Context) { close(b); bSaw = wait(a) })
	if !aSaw || !bSaw {
		t.Fatalf("the steps ran one after the other (first saw the second start: %v, second saw the first: %v)", aSaw, bSaw)
	}
}

// A step that panics panics the reconcile, after every step has returned,
// where controller-runtime recovers it.
func TestConcurrentlyPanicsInTheReconcile(t *testing.T) {
	r := &Reconciler{}
	otherDone := false
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want the step's panic", p)
		}
		if !otherDone {
			t.Fatal("the reconcile went on before the other step returned")
		}
	}()
	r.concurrently(context.Background(),
		func(context.Context) { panic("boom") },
		func(context.Context) { time.Sleep(50 * time.Millisecond); otherDone = true })
	t.Fatal("concurrently returned after a step panicked")
}
