package fencedcontroller_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
)

func TestFieldManager(t *testing.T) {
	long := strings.Repeat("m", 110)
	tests := []struct {
		name, manager string
		fence         int64
		want, err     string
	}{
		{name: "plain", manager: "widget-controller", fence: 42, want: "widget-controller;fencedlease.io/fence=42"},
		{name: "an older fence is replaced", manager: "widget-controller;fencedlease.io/fence=41", fence: 42,
			want: "widget-controller;fencedlease.io/fence=42"},
		{name: "largest fence", manager: "m", fence: 9223372036854775807, want: "m;fencedlease.io/fence=9223372036854775807"},
		{name: "no manager", manager: "", fence: 42,
			err: "no field manager to carry fence 42: set one (ClientOptions.FieldManager, or client.FieldOwner on the write)"},
		{name: "no fence", manager: "m", fence: 0, err: `field manager "m": fence 0 is not a valid fence`},
		{name: "too long", manager: long, fence: 42,
			err: `field manager "` + long + `" cannot carry fence 42: fieldManager: Too long: may not be more than 128 bytes`},
		{name: "not printable", manager: "a\tb", fence: 42,
			err: `field manager "a\tb" cannot carry fence 42: fieldManager: Invalid value: "a\tb;fencedlease.io/fence=42": invalid character U+0009 (at position 1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := fencedcontroller.FieldManager(tt.manager, tt.fence)
			if tt.err != "" {
				g.Expect(err).To(MatchError(tt.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
			g.Expect(len(got)).To(BeNumerically("<=", 128))
		})
	}
}
