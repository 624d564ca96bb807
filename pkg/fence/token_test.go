package fence_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

func TestParseFence(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "1", want: 1},
		{in: "42", want: 42},
		{in: "9223372036854775807", want: 9223372036854775807},
		{in: "", wantErr: `invalid fence "": empty`},
		{in: "abc", wantErr: `invalid fence "abc": not a decimal integer`},
		{in: "-1", wantErr: `invalid fence "-1": sign not allowed`},
		{in: "+1", wantErr: `invalid fence "+1": sign not allowed`},
		{in: "007", wantErr: `invalid fence "007": leading zero`},
		{in: "00", wantErr: `invalid fence "00": leading zero`},
		{in: "0", wantErr: `invalid fence "0": must be positive`},
		{in: " 42", wantErr: `invalid fence " 42": whitespace not allowed`},
		{in: "42\n", wantErr: `invalid fence "42\n": whitespace not allowed`},
		{in: "4 2", wantErr: `invalid fence "4 2": whitespace not allowed`},
		{in: "4.2e1", wantErr: `invalid fence "4.2e1": not a decimal integer`},
		{in: "0x2a", wantErr: `invalid fence "0x2a": not a decimal integer`},
		{in: "9223372036854775808", wantErr: `invalid fence "9223372036854775808": out of range for int64`},
		{in: "99999999999999999999999", wantErr: `invalid fence "99999999999999999999999": out of range for int64`},
		{in: "٤٢", wantErr: `invalid fence "٤٢": non-ASCII character`},
		{in: "４２", wantErr: `invalid fence "４２": non-ASCII character`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := fence.ParseFence(tt.in)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(got).To(BeZero())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestTokenIsHolder(t *testing.T) {
	tests := []struct {
		tok  fence.Token
		want bool
	}{
		{tok: fence.Token{Role: fence.RoleHolder, Fence: 1, Lease: "a"}, want: true},
		{tok: fence.Token{Role: fence.RoleHolder, Fence: 0, Lease: "a"}, want: false},
		{tok: fence.Token{Role: fence.RoleStandby, Fence: 5, Lease: "a"}, want: false},
		{tok: fence.Token{}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.tok.String(), func(t *testing.T) {
			NewWithT(t).Expect(tt.tok.IsHolder()).To(Equal(tt.want))
		})
	}
}
