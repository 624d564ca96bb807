package fencedlease

import (
	"testing"

	"github.com/fencedlease/fencedlease/internal/holder"
)

// The Lease read beside the list stands for the read after it only when
// nothing was marked and the holder as listed carries nothing of the grant
// or a newer one: a mark of the grant itself is its revocation's demotion.
func TestEarlyConfirm(t *testing.T) {
	const fence = 140
	for _, c := range []struct {
		name   string
		marked bool
		listed holder.Publication
		want   bool
	}{
		{"a standby of an older grant", false, holder.Publication{Role: holder.RoleStandby, Grant: 88}, true},
		{"a pod that carries nothing yet", false, holder.Publication{}, true},
		{"the holder of an older grant to the same pod", false, holder.Publication{Role: holder.RoleHolder, Fence: 88, Grant: 88}, true},
		{"step 3 marked a pod", true, holder.Publication{Role: holder.RoleStandby, Grant: 88}, false},
		{"demoted by a revocation of this grant", false, holder.Publication{Role: holder.RoleStandby, Grant: fence}, false},
		{"marked by a newer grant", false, holder.Publication{Role: holder.RoleStandby, Grant: 157}, false},
		{"published with a newer fence", false, holder.Publication{Role: holder.RoleHolder, Fence: 157, Grant: 157}, false},
	} {
		if got := earlyConfirm(c.marked, c.listed, fence); got != c.want {
			t.Errorf("%s: earlyConfirm = %v, want %v", c.name, got, c.want)
		}
	}
}
