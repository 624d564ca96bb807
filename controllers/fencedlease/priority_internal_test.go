package fencedlease

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

func TestPriorityOfARegrantIsBehindTheRenewals(t *testing.T) {
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{record.LeaseState: holder.StateHeld}}}
	for _, tc := range []struct {
		name   string
		s      scope
		expect int
	}{
		{"a held grant", scope{lease: held}, PriorityRenewal},
		{"a held grant found expired, its re-grant waiting", scope{lease: held, mem: &memory{expired: true}}, 0},
		{"no grant", scope{lease: &coordinationv1.Lease{}}, 0},
	} {
		if got := *priorityOf(&tc.s); got != tc.expect {
			t.Errorf("%s: priority %d, want %d", tc.name, got, tc.expect)
		}
	}
}

func TestFirstRenewalsOfInheritedGrantsAreSpread(t *testing.T) {
	const interval = 10 * time.Second
	lo, hi := interval, time.Duration(0)
	for i := range 1000 {
		key := types.NamespacedName{Namespace: "scale", Name: fmt.Sprintf("fl-%d", i)}
		d := firstRenewal(key, interval)
		if d < interval/4 || d > interval {
			t.Fatalf("firstRenewal(%s) = %s, want within [%s, %s]", key, d, interval/4, interval)
		}
		if d != firstRenewal(key, interval) {
			t.Fatalf("firstRenewal(%s) changes from one call to the next", key)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo > 3*time.Second || hi < 9500*time.Millisecond {
		t.Errorf("1,000 FencedLeases spread over [%s, %s] only, want about [2.5s, 10s]", lo, hi)
	}
}
