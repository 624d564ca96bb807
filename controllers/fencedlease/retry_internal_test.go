package fencedlease

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

func TestRetriesDoubleUpToTheLongestAndSettle(t *testing.T) {
	rt := newMemories(clock.RealClock{})
	a, b := types.NamespacedName{Namespace: "n", Name: "a"}, types.NamespacedName{Namespace: "n", Name: "b"}
	want := []time.Duration{10, 20, 40, 80, 160, 200, 200}
	for i, w := range want {
		if got := rt.retryAfter(a); got != w*time.Millisecond {
			t.Fatalf("look %d in a row: %s, want %s", i+1, got, w*time.Millisecond)
		}
	}
	if got := rt.retryAfter(b); got != firstRetry {
		t.Fatalf("another FencedLease's first retry: %s, want %s", got, firstRetry)
	}
	rt.settled(a)
	if got := rt.retryAfter(a); got != firstRetry {
		t.Fatalf("after settling: %s, want %s", got, firstRetry)
	}
	rt.retryAfter(b)
	rt.forget(b)
	if got := rt.retryAfter(b); got != firstRetry {
		t.Fatalf("after forgetting: %s, want %s", got, firstRetry)
	}
}
