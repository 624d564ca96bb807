package holder

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

func TestEnded(t *testing.T) {
	held := Lease{State: StateHeld, HolderUID: "b", Fence: 200}
	tests := []struct {
		name  string
		lease Lease
		uid   string
		fence int64
		want  bool
	}{
		{"the current grant", held, "b", 200, false},
		{"an older grant", held, "a", 100, true},
		{"an older fence of the same pod", held, "b", 100, true},
		{"a newer grant than the Lease as read: the read lags", held, "c", 300, false},
		{"the same fence revoked", Lease{State: StateRevoked, HolderUID: "b", Fence: 200}, "b", 200, true},
		{"the same fence superseded by a pending grant", Lease{State: StatePending, HolderUID: "c", Fence: 200}, "b", 200, true},
		{"the same fence on another pod (impossible, but not current)", held, "x", 200, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(Ended(tt.lease, types.UID(tt.uid), tt.fence)).To(Equal(tt.want))
		})
	}
}

func TestCachedPodAction(t *testing.T) {
	held := Lease{State: StateHeld, HolderUID: "b", Fence: 200}
	standby := Publication{UID: "a", Labelled: true, Lease: "db", Role: RoleStandby}
	tests := []struct {
		name      string
		pod       Publication
		candidate bool
		current   bool
		lease     Lease
		want      PodAction
	}{
		{"a new candidate becomes a standby", Publication{UID: "a"}, true, false, held, Standby},
		{"a standby stays", standby, true, false, held, Leave},
		{"a standby without the label gets it", Publication{UID: "a", Lease: "db", Role: RoleStandby}, true, false, held, Standby},
		{"the holder of the current grant is left alone", Publication{UID: "b", Labelled: true, Lease: "db", Role: RoleHolder, Fence: 200}, true, true, held, Leave},
		{"the holder named by a newer grant than the Lease as read is left alone (lagging cache)",
			Publication{UID: "c", Labelled: true, Lease: "db", Role: RoleHolder, Fence: 300}, true, false, held, Leave},
		{"the holder of an ended grant becomes a standby", Publication{UID: "a", Labelled: true, Lease: "db", Role: RoleHolder, Fence: 100}, true, false, held, Standby},
		{"the newly granted pod is labelled, not published", Publication{UID: "b"}, true, true, held, Label},
		{"the newly granted pod with the label is left for the publish step", Publication{UID: "b", Labelled: true, Lease: "db", Role: RoleStandby}, true, true, held, Leave},
		{"the newly granted pod published for another FencedLease gets a standby's annotations, not the label alone (seed 3557)",
			Publication{UID: "b", Foreign: true}, true, true, held, Standby},
		{"the newly granted pod with the label and another FencedLease's annotations gets a standby's annotations",
			Publication{UID: "b", Labelled: true, Foreign: true}, true, true, held, Standby},
		{"a pod published for another FencedLease that is no candidate is left alone", Publication{UID: "z", Foreign: true}, false, false, held, Leave},
		{"a pod no longer selected is cleared", standby, false, false, held, Clear},
		{"a pod no longer selected that holds a live grant waits for its revocation", Publication{UID: "b", Labelled: true, Lease: "db", Role: RoleHolder, Fence: 200}, false, true, held, Leave},
		{"a pod no longer selected whose grant was revoked is cleared",
			Publication{UID: "b", Labelled: true, Lease: "db", Role: RoleHolder, Fence: 200}, false, false, Lease{State: StateRevoked, HolderUID: "b", Fence: 200}, Clear},
		{"a bare pod that is not a candidate is left alone", Publication{UID: "z"}, false, false, held, Leave},
		{"a forged role without a fence is no holder", Publication{UID: "a", Labelled: true, Lease: "db", Role: RoleHolder}, true, false, held, Standby},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(CachedPodAction(tt.pod, "db", tt.candidate, tt.current, tt.lease)).To(Equal(tt.want))
		})
	}
}

func TestMarkAction(t *testing.T) {
	marked := Publication{UID: "a", Labelled: true, Lease: "db", Role: RoleStandby, Grant: 300}
	tests := []struct {
		name      string
		pod       Publication
		candidate bool
		want      PodAction
	}{
		{"a standby already marked for this grant", marked, true, Leave},
		{"a standby marked for an older grant is marked again", Publication{UID: "a", Labelled: true, Lease: "db", Role: RoleStandby, Grant: 200}, true, Standby},
		{"the old holder is demoted and marked", Publication{UID: "a", Labelled: true, Lease: "db", Role: RoleHolder, Fence: 200, Grant: 200}, true, Standby},
		{"a pod that is no longer a candidate is cleared", marked, false, Clear},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(MarkAction(tt.pod, "db", tt.candidate, 300)).To(Equal(tt.want))
		})
	}
}
