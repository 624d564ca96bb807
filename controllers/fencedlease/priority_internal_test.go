package fencedlease

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencedlease/fencedlease/internal/holder"
)

func TestPriorityOfARegrantIsBehindTheRenewals(t *testing.T) {
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationState: holder.StateHeld}}}
	for _, tc := range []struct {
		name   string
		s      scope
		expect int
	}{
		{"a held grant", scope{lease: held}, PriorityRenewal},
		{"a held grant found expired, its re-grant waiting", scope{lease: held, behind: true}, 0},
		{"no grant", scope{lease: &coordinationv1.Lease{}}, 0},
	} {
		if got := *priorityOf(&tc.s); got != tc.expect {
			t.Errorf("%s: priority %d, want %d", tc.name, got, tc.expect)
		}
	}
}
