package record_test

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// TestNamesAreTheAPIs holds the codec's names to api/v1alpha1, which
// documents them: the workload library reads them through this package
// alone.
func TestNamesAreTheAPIs(t *testing.T) {
	g := NewWithT(t)
	for _, pair := range [][2]string{
		{record.Prefix, fencingv1alpha1.Prefix}, {record.LabelLease, fencingv1alpha1.LabelLease},
		{record.AnnotationLease, fencingv1alpha1.AnnotationLease}, {record.AnnotationRole, fencingv1alpha1.AnnotationRole},
		{record.AnnotationFence, fencingv1alpha1.AnnotationFence}, {record.AnnotationGrant, fencingv1alpha1.AnnotationGrant},
		{record.LeaseHolderUID, fencingv1alpha1.LeaseAnnotationHolderUID}, {record.LeaseState, fencingv1alpha1.LeaseAnnotationState},
		{record.LeaseRenewal, fencingv1alpha1.LeaseAnnotationRenewal}, {record.LeaseRenewInterval, fencingv1alpha1.LeaseAnnotationRenewInterval},
		{record.LeaseHandoff, fencingv1alpha1.LeaseAnnotationHandoff}, {record.LabelInject, fencingv1alpha1.LabelInject},
		{record.LeaseVouchedBy, fencingv1alpha1.LeaseAnnotationVouchedBy}, {record.LeaseDuration, fencingv1alpha1.LeaseAnnotationLeaseDuration},
		{record.HeartbeatBeats, fencingv1alpha1.HeartbeatAnnotationBeats}, {record.LabelHeartbeat, fencingv1alpha1.LabelHeartbeat},
		{record.StatePending, fencingv1alpha1.LeaseStatePending}, {record.StateHeld, fencingv1alpha1.LeaseStateHeld},
		{record.StateRevoked, fencingv1alpha1.LeaseStateRevoked}, {record.StateReleased, fencingv1alpha1.LeaseStateReleased},
		{record.RoleHolder, fencingv1alpha1.RoleHolder}, {record.RoleStandby, fencingv1alpha1.RoleStandby},
		{record.RenewalOperator, string(fencingv1alpha1.RenewalOperator)}, {record.RenewalHolder, string(fencingv1alpha1.RenewalHolder)},
	} {
		g.Expect(pair[0]).To(Equal(pair[1]))
	}
}

func TestParseFence(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"1", 1, ""}, {"42", 42, ""}, {"9223372036854775807", 9223372036854775807, ""},
		{"", 0, "empty"}, {"abc", 0, "not a decimal integer"}, {"-1", 0, "sign not allowed"}, {"+1", 0, "sign not allowed"},
		{"0", 0, "must be positive"}, {"007", 0, "leading zero"}, {" 42", 0, "whitespace not allowed"}, {"42\n", 0, "whitespace not allowed"},
		{"4.2e1", 0, "not a decimal integer"}, {"9223372036854775808", 0, "out of range for int64"}, {"٤٢", 0, "non-ASCII character"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			n, err := record.ParseFence(tc.in)
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(n).To(Equal(tc.want))
				g.Expect(record.FormatFence(n)).To(Equal(tc.in), "a canonical fence writes back as it was read")
				return
			}
			g.Expect(err).To(MatchError(`invalid fence "` + strings.ReplaceAll(tc.in, "\n", `\n`) + `": ` + tc.err))
			g.Expect(record.FenceOf(tc.in)).To(BeZero())
		})
	}
}

func TestLeaseRecord(t *testing.T) {
	g := NewWithT(t)
	ann := map[string]string{"fencedlease.io/state": "held", "fencedlease.io/holder-uid": "u1", "fencedlease.io/fence": "42",
		"fencedlease.io/renewal": "Holder", "fencedlease.io/renew-interval": "5", "fencedlease.io/handoff": "h", "other": "x"}
	l := record.ParseLease(ann)
	g.Expect(l).To(Equal(record.Lease{State: "held", HolderUID: "u1", Fence: 42, Renewal: "Holder", RenewInterval: 5, Handoff: "h"}))
	g.Expect(l.Holds("u1")).To(BeTrue())
	g.Expect(l.Holds("u2")).To(BeFalse())
	g.Expect(l.HolderRenews()).To(BeTrue())
	back := map[string]string{"other": "x"}
	l.Apply(back)
	g.Expect(back).To(Equal(ann), "a record applied writes what it was read from")

	// Applied over annotations that say more, it removes what it does not
	// say, and what did not parse: the annotations then read as the record.
	over := map[string]string{"fencedlease.io/vouched-by": "hb", "fencedlease.io/lease-duration": "15",
		"fencedlease.io/fence": "042", "other": "x"}
	record.Lease{State: "revoked", HolderUID: "u1"}.Apply(over)
	g.Expect(over).To(Equal(map[string]string{"fencedlease.io/state": "revoked", "fencedlease.io/holder-uid": "u1", "other": "x"}))

	g.Expect(record.ParseLease(map[string]string{"fencedlease.io/fence": "042", "fencedlease.io/renew-interval": "-3"})).
		To(Equal(record.Lease{}), "what does not parse counts as none")
	g.Expect(record.Lease{State: "pending", HolderUID: "u1", Fence: 42}.Held()).To(BeFalse())
}

func TestPodRecord(t *testing.T) {
	g := NewWithT(t)
	labels := map[string]string{"fencedlease.io/lease": "db"}
	g.Expect(record.ParsePod(labels, map[string]string{"fencedlease.io/lease": "db", "fencedlease.io/role": "holder",
		"fencedlease.io/fence": "42", "fencedlease.io/grant": "42"}, "db")).
		To(Equal(record.Pod{Labelled: true, Lease: "db", Role: "holder", Fence: 42, Grant: 42}))
	g.Expect(record.ParsePod(labels, map[string]string{"fencedlease.io/role": "holder", "fencedlease.io/fence": "x"}, "db").Fence).
		To(BeEquivalentTo(-1), "a fence that does not parse is not no fence")
	g.Expect(record.ParsePod(labels, nil, "other")).To(Equal(record.Pod{}), "another FencedLease's pod carries nothing of this one")
	g.Expect(record.ParsePod(labels, map[string]string{"fencedlease.io/lease": "other", "fencedlease.io/role": "holder",
		"fencedlease.io/fence": "151", "fencedlease.io/grant": "151"}, "db")).
		To(Equal(record.Pod{Labelled: true, Foreign: true}), "relabelled, the pod carries only db's label: its token files are other's")
	g.Expect(record.ParsePod(map[string]string{"fencedlease.io/lease": "other"}, map[string]string{"fencedlease.io/lease": "other",
		"fencedlease.io/role": "holder", "fencedlease.io/fence": "151"}, "db")).
		To(Equal(record.Pod{Foreign: true}), "another FencedLease's publication is foreign to this one")
	lease, fence := record.Published(map[string]string{"fencedlease.io/lease": "db", "fencedlease.io/role": "holder", "fencedlease.io/fence": "7"})
	g.Expect([]any{lease, fence}).To(Equal([]any{"db", int64(7)}))
	lease, _ = record.Published(map[string]string{"fencedlease.io/lease": "db", "fencedlease.io/role": "standby"})
	g.Expect(lease).To(BeEmpty())
}

func TestBeatsRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 42, 1 << 40} {
		ann := map[string]string{}
		record.WriteBeats(map[string]string{}, ann, n)
		if got := record.BeatsOf(ann); got != n {
			t.Errorf("BeatsOf after WriteBeats(%d) = %d", n, got)
		}
	}
	for _, bad := range []string{"", "x", "-3", "007"} {
		if got := record.BeatsOf(map[string]string{record.HeartbeatBeats: bad}); got != 0 {
			t.Errorf("BeatsOf(%q) = %d, want 0 for a count that does not parse", bad, got)
		}
	}
}

// TestPodWrites holds the write side of a pod's record: each merge patch as
// it reaches the API server, and a publication read back as written.
func TestPodWrites(t *testing.T) {
	g := NewWithT(t)
	patch := func(md map[string]any) string {
		data, err := json.Marshal(map[string]any{"metadata": md})
		g.Expect(err).NotTo(HaveOccurred())
		return string(data)
	}
	g.Expect(patch(record.PodMergePatch("db", true, nil))).To(Equal(`{"metadata":{"labels":{"fencedlease.io/lease":"db"}}}`))
	g.Expect(patch(record.PodMergePatch("db", true, &record.Pod{Lease: "db", Role: "standby"}))).To(Equal(
		`{"metadata":{"annotations":{"fencedlease.io/fence":"","fencedlease.io/lease":"db","fencedlease.io/role":"standby"},"labels":{"fencedlease.io/lease":"db"}}}`))
	g.Expect(patch(record.PodMergePatch("db", true, &record.Pod{Lease: "db", Role: "holder", Fence: 7, Grant: 7}))).To(Equal(
		`{"metadata":{"annotations":{"fencedlease.io/fence":"7","fencedlease.io/grant":"7","fencedlease.io/lease":"db","fencedlease.io/role":"holder"},"labels":{"fencedlease.io/lease":"db"}}}`))
	g.Expect(patch(record.PodMergePatch("db", false, nil))).To(Equal(
		`{"metadata":{"annotations":{"fencedlease.io/fence":null,"fencedlease.io/grant":null,"fencedlease.io/lease":null,"fencedlease.io/role":null},"labels":{"fencedlease.io/lease":null}}}`))

	labels, ann := map[string]string{record.LabelLease: "db"}, map[string]string{}
	written := record.Pod{Labelled: true, Lease: "db", Role: "holder", Fence: 42, Grant: 42}
	written.Apply(ann)
	g.Expect(record.ParsePod(labels, ann, "db")).To(Equal(written), "a publication reads back as written")
	record.Pod{Lease: "db", Role: "standby"}.Apply(ann)
	g.Expect(record.ParsePod(labels, ann, "db")).To(Equal(record.Pod{Labelled: true, Lease: "db", Role: "standby", Grant: 42}),
		"a standby's publication clears the fence and keeps the grant it was marked for")
}
