package holder

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCheckIncreases(t *testing.T) {
	tests := []struct {
		name    string
		rv      string
		floor   int64
		want    int64
		wantErr string
	}{
		{name: "first fence", rv: "1234", floor: 0, want: 1234},
		{name: "greater than floor", rv: "1235", floor: 1234, want: 1235},
		{name: "equal is a regression", rv: "1234", floor: 1234, wantErr: "new fence 1234 is not greater than fence 1234 already published"},
		{name: "lower is a regression", rv: "99", floor: 1234, wantErr: "new fence 99 is not greater than fence 1234 already published"},
		{name: "opaque resourceVersion", rv: "abc", wantErr: `resourceVersion "abc" is not a positive decimal int64, so it cannot be a fence`},
		{name: "leading zero", rv: "0123", wantErr: `resourceVersion "0123" is not a positive decimal int64, so it cannot be a fence`},
		{name: "zero", rv: "0", wantErr: `resourceVersion "0" is not a positive decimal int64, so it cannot be a fence`},
		{name: "beyond int64", rv: "9223372036854775808", wantErr: `resourceVersion "9223372036854775808" is not a positive decimal int64, so it cannot be a fence`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := CheckIncreases(tt.rv, tt.floor)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
	var re *RegressionError
	_, err := CheckIncreases("5", 7)
	NewWithT(t).Expect(errors.As(err, &re)).To(BeTrue())
	NewWithT(t).Expect(MaxFence(3, 9, 4)).To(Equal(int64(9)))
}
