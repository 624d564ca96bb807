package record_test

import (
	"testing"

	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

func TestShardsRoundTrip(t *testing.T) {
	g := NewWithT(t)
	g.Expect(record.LabelShard).To(Equal(fencingv1alpha1.LabelShard))
	g.Expect(record.LabelShardSet).To(Equal(fencingv1alpha1.LabelShardSet))
	g.Expect(record.AnnotationShards).To(Equal(fencingv1alpha1.AnnotationShards))
	g.Expect(record.AnnotationShardsMark).To(Equal(fencingv1alpha1.AnnotationShardsMark))
	g.Expect(record.LeasePreviousHolders).To(Equal(fencingv1alpha1.LeaseAnnotationPreviousHolders))
	a := map[string]string{}
	g.Expect(record.PreviousHolders(a)).To(BeEmpty())
	record.SetPreviousHolders(a, []record.Holder{{Name: "p", UID: "u1"}, {Name: "q", UID: "u2"}, {Name: "p", UID: "u1"}})
	g.Expect(a).To(HaveKeyWithValue(record.LeasePreviousHolders, "p/u1,q/u2"), "each pod once")
	g.Expect(record.PreviousHolders(a)).To(Equal([]record.Holder{{Name: "p", UID: "u1"}, {Name: "q", UID: "u2"}}))
	record.SetPreviousHolders(a, nil)
	g.Expect(a).To(BeEmpty())

	// A Lease written by an operator that recorded one previous holder
	// (fencedlease.io/previous-holder) keeps the mark it owes after an
	// upgrade, and loses the old key at the next write.
	old := map[string]string{"fencedlease.io/previous-holder": "r/u3"}
	g.Expect(record.PreviousHolders(old)).To(Equal([]record.Holder{{Name: "r", UID: "u3"}}))
	old[record.LeasePreviousHolders] = "p/u1,r/u3"
	g.Expect(record.PreviousHolders(old)).To(Equal([]record.Holder{{Name: "p", UID: "u1"}, {Name: "r", UID: "u3"}}), "each pod once")
	record.SetPreviousHolders(old, record.PreviousHolders(old))
	g.Expect(old).To(Equal(map[string]string{record.LeasePreviousHolders: "p/u1,r/u3"}))
	old["fencedlease.io/previous-holder"] = "r/u3"
	record.SetPreviousHolders(old, nil)
	g.Expect(old).To(BeEmpty())

	in := map[string]int64{"17": 41302, "3": 41210, "eu": 9}
	v := record.FormatShards(in)
	g.Expect(v).To(Equal(`{"17":"41302","3":"41210","eu":"9"}`))
	out, err := record.ParseShards(v)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(in))

	g.Expect(record.FormatShards(nil)).To(BeEmpty())
	none, err := record.ParseShards("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none).To(BeEmpty())
}

func TestShardsRefuseWhatDoesNotParse(t *testing.T) {
	for _, tc := range []struct{ value, names string }{
		{`[1,2]`, "not a JSON object"},
		{`{"3":41210}`, "not a JSON object"},
		{`{"3":"0041210"}`, `shard "3"`},
		{`{"3":"-1"}`, `shard "3"`},
		{`{"":"5"}`, "no key"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			g := NewWithT(t)
			_, err := record.ParseShards(tc.value)
			g.Expect(err).To(MatchError(ContainSubstring(tc.names)))
		})
	}
}
