package gateway

import (
	"errors"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestDechunker(t *testing.T) {
	// The CRC32 (IEEE) of "hello world" is 0x0d4a1185: DUoRhQ== in base64;
	// its SHA-256 is b94d27b9…
	tests := []struct {
		name, trailer, body, want, wantErr string
		checksum                           bool
	}{
		{name: "signed chunks", body: "5;chunk-signature=abc\r\nhello\r\n6;chunk-signature=def\r\n world\r\n0;chunk-signature=0\r\n\r\n", want: "hello world"},
		{name: "unsigned with trailer", trailer: "x-amz-checksum-crc32", body: "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n", want: "hello world"},
		{name: "signed trailer", trailer: "x-amz-checksum-sha256",
			body: "b;chunk-signature=a\r\nhello world\r\n0;chunk-signature=b\r\nx-amz-checksum-sha256:uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=\r\nx-amz-trailer-signature:c\r\n\r\n", want: "hello world"},
		{name: "no final CRLF", body: "5\r\nhello\r\n0\r\n", want: "hello"},
		{name: "wrong trailing checksum", trailer: "x-amz-checksum-crc32", body: "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
			wantErr: "trailing checksum mismatch: x-amz-checksum-crc32 is AAAAAA==, the body's is DUoRhQ==", checksum: true},
		{name: "no trailing checksum", trailer: "x-amz-checksum-crc32", body: "b\r\nhello world\r\n0\r\n\r\n",
			wantErr: "trailing checksum mismatch: x-amz-trailer announces x-amz-checksum-crc32, and the body has no such trailer", checksum: true},
		{name: "bad size", body: "zz\r\nhello\r\n", wantErr: `malformed aws-chunked body: chunk size "zz"`},
		{name: "short chunk", body: "10\r\nhello", wantErr: "malformed aws-chunked body: unexpected EOF"},
		{name: "no CRLF after data", body: "5\r\nhelloXX0\r\n\r\n", wantErr: "malformed aws-chunked body: no CRLF after a chunk"},
		{name: "endless line", body: strings.Repeat("1", 10000), wantErr: "malformed aws-chunked body: line longer than 4096 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := newDechunker(strings.NewReader(tc.body), tc.trailer)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := io.ReadAll(d)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(errors.Is(err, errBadChecksum)).To(Equal(tc.checksum))
				g.Expect(errors.Is(err, errBadChunk)).To(Equal(!tc.checksum))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(tc.want))
		})
	}
	_, err := newDechunker(strings.NewReader(""), "x-amz-checksum-md5")
	NewWithT(t).Expect(err).To(MatchError(`x-amz-trailer "x-amz-checksum-md5" is not a checksum the gateway verifies ` +
		`(x-amz-checksum-crc32, x-amz-checksum-crc32c, x-amz-checksum-crc64nvme, x-amz-checksum-sha1, x-amz-checksum-sha256); send the checksum as a header, or none`))
}
