package fieldmanager_test

import (
	"testing"

	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
)

// TestFenceIsTheAPIs: the format is the one api/v1alpha1 documents.
func TestFenceIsTheAPIs(t *testing.T) {
	NewWithT(t).Expect(fieldmanager.Fence).To(Equal(fencingv1alpha1.FieldManagerFence))
}

func TestFormat(t *testing.T) {
	g := NewWithT(t)
	g.Expect(fieldmanager.Format("widget-controller", 42)).To(Equal("widget-controller;fencedlease.io/fence=42"))
	g.Expect(fieldmanager.Format("widget-controller;fencedlease.io/fence=41", 42)).To(Equal("widget-controller;fencedlease.io/fence=42"))
	g.Expect(fieldmanager.Format("m;fencedlease.io/fence=x", 7)).To(Equal("m;fencedlease.io/fence=7"))
	g.Expect(fieldmanager.Format("m;fencedlease.io/fence=1;fencedlease.io/fence=2", 3)).To(Equal("m;fencedlease.io/fence=3"), "every fence it carried is dropped")
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, manager string
		fence             int64
		err               string
	}{
		{name: "fence", in: "widget-controller;fencedlease.io/fence=42", manager: "widget-controller", fence: 42},
		{name: "largest fence", in: "m;fencedlease.io/fence=9223372036854775807", manager: "m", fence: 9223372036854775807},
		{name: "the last fence counts", in: "m;fencedlease.io/fence=1;fencedlease.io/fence=2", manager: "m;fencedlease.io/fence=1", fence: 2},
		{name: "no fence", in: "widget-controller", manager: "widget-controller", err: fieldmanager.ErrNoFence.Error()},
		{name: "leading zero", in: "m;fencedlease.io/fence=0042", manager: "m", err: `invalid fence "0042": leading zero`},
		{name: "empty fence", in: "m;fencedlease.io/fence=", manager: "m", err: `invalid fence "": empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			manager, fence, err := fieldmanager.Parse(tt.in)
			g.Expect(manager).To(Equal(tt.manager))
			if tt.err != "" {
				g.Expect(err).To(MatchError(tt.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fence).To(Equal(tt.fence))
		})
	}
}

// TestParseReadsFormat: Parse reads back what Format writes.
func TestParseReadsFormat(t *testing.T) {
	g := NewWithT(t)
	for _, manager := range []string{"m", "widget-controller", "a;b", "m;fencedlease.io/fence=3"} {
		wantManager, _, _ := fieldmanager.Parse(manager)
		got, fence, err := fieldmanager.Parse(fieldmanager.Format(manager, 99))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(wantManager))
		g.Expect(fence).To(Equal(int64(99)))
	}
}
