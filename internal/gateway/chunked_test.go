package gateway

import (
	"errors"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestDechunker(t *testing.T) {
	tests := []struct {
		name, body, want, wantErr string
	}{
		{name: "signed chunks", body: "5;chunk-signature=abc\r\nhello\r\n6;chunk-signature=def\r\n world\r\n0;chunk-signature=0\r\n\r\n", want: "hello world"},
		{name: "unsigned with trailer", body: "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n", want: "hello world"},
		{name: "no final CRLF", body: "5\r\nhello\r\n0\r\n", want: "hello"},
		{name: "bad size", body: "zz\r\nhello\r\n", wantErr: `malformed aws-chunked body: chunk size "zz"`},
		{name: "short chunk", body: "10\r\nhello", wantErr: "malformed aws-chunked body: unexpected EOF"},
		{name: "no CRLF after data", body: "5\r\nhelloXX0\r\n\r\n", wantErr: "malformed aws-chunked body: no CRLF after a chunk"},
		{name: "endless line", body: strings.Repeat("1", 10000), wantErr: "malformed aws-chunked body: line longer than 4096 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := io.ReadAll(newDechunker(strings.NewReader(tc.body)))
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(errors.Is(err, errBadChunk)).To(BeTrue())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(tc.want))
		})
	}
}

func TestKeyLocksForget(t *testing.T) {
	g := NewWithT(t)
	var k keyLocks
	u1 := k.lock("a")
	u2 := k.lock("b")
	g.Expect(k.size()).To(Equal(2))
	u1()
	u2()
	g.Expect(k.size()).To(BeZero(), "no entry outlives its writes")
}

func TestTokenReviewCacheBounded(t *testing.T) {
	g := NewWithT(t)
	a := &TokenReviewer{TTL: 1 << 40, Max: 8}
	for i := range 100 {
		a.remember([32]byte{byte(i)}, reviewEntry{})
	}
	g.Expect(len(a.cache)).To(BeNumerically("<=", 8))
}
