package fencedlease

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A FencedLease whose reconciles failed for a long time (an outage) is
// looked at again within errorRetryMax once they succeed again, not after
// controller-runtime's default of up to 16 minutes; the first retries stay
// fast.
func TestErrorRetryIsCapped(t *testing.T) {
	rl := errorRateLimiter()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "db"}}
	if first := rl.When(item); first > 10*time.Millisecond {
		t.Fatalf("first retry after %v, want a few milliseconds", first)
	}
	var last time.Duration
	for range 40 {
		last = rl.When(item)
	}
	if last > errorRetryMax || last < errorRetryMax/2 {
		t.Fatalf("retry after 40 failures in a row: %v, want about %v", last, errorRetryMax)
	}
	rl.Forget(item)
	if again := rl.When(item); again > 10*time.Millisecond {
		t.Fatalf("after a success the first retry is %v, want a few milliseconds again", again)
	}
}
