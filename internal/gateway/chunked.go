package gateway

import (
	"bufio"
	"crypto/sha1" //nolint:gosec // S3's x-amz-checksum-sha1 is SHA-1.
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"strconv"
	"strings"
)

// maxChunkLine bounds a chunk header or trailer line of an aws-chunked body.
const maxChunkLine = 4096

// isAWSChunked reports whether a request body is in S3's aws-chunked
// encoding (chunk signatures, or an unsigned body with trailing checksums):
// the gateway re-signs the request, so it forwards only the data.
func isAWSChunked(contentSHA, contentEncoding string) bool {
	return strings.HasPrefix(contentSHA, "STREAMING-") || strings.Contains(contentEncoding, "aws-chunked")
}

// dechunker reads the data of an aws-chunked body:
//
//	<hex size>[;chunk-signature=<sig>]\r\n<data>\r\n ... 0[;...]\r\n[trailers\r\n]\r\n
//
// Chunk signatures are dropped (the gateway re-signs the request). The
// trailing checksum that x-amz-trailer announces is computed over the data
// and checked at the end: the body's EOF comes only after it matched.
// Memory is bounded whatever the body holds.
type dechunker struct {
	r    *bufio.Reader
	left int64
	done bool
	err  error
	// trailer is the checksum trailer's name (lower case), sum its hash;
	// none when trailer is "".
	trailer string
	sum     hash.Hash
}

// newDechunker reads an aws-chunked body whose x-amz-trailer is trailer
// ("" when none). A trailer that is not a checksum the gateway can verify
// is refused: forwarding the data without it would drop the check the
// client asked for.
func newDechunker(r io.Reader, trailer string) (*dechunker, error) {
	d := &dechunker{r: bufio.NewReaderSize(r, maxChunkLine), trailer: strings.ToLower(strings.TrimSpace(trailer))}
	if d.trailer != "" {
		h, ok := checksums[d.trailer]
		if !ok {
			return nil, fmt.Errorf("x-amz-trailer %q is not a checksum the gateway verifies (%s); send the checksum as a header, or none", trailer, strings.Join(checksumNames, ", "))
		}
		d.sum = h()
	}
	return d, nil
}

// checksums are the trailing checksums of S3's flexible checksums, by
// trailer name.
var checksums = map[string]func() hash.Hash{
	"x-amz-checksum-crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"x-amz-checksum-crc32c":    func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"x-amz-checksum-crc64nvme": func() hash.Hash { return crc64.New(crc64NVME) },
	"x-amz-checksum-sha1":      sha1.New,
	"x-amz-checksum-sha256":    sha256.New,
}

var checksumNames = []string{"x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-crc64nvme", "x-amz-checksum-sha1", "x-amz-checksum-sha256"}

// crc64NVME is the CRC-64/NVME table (the reversed polynomial, as
// hash/crc64 wants it).
var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

var (
	errBadChunk    = errors.New("malformed aws-chunked body")
	errBadChecksum = errors.New("trailing checksum mismatch")
)

func (d *dechunker) line() (string, error) {
	l, err := d.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", fmt.Errorf("%w: line longer than %d bytes", errBadChunk, maxChunkLine)
		}
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%w: %w", errBadChunk, io.ErrUnexpectedEOF)
		}
		return "", err
	}
	return strings.TrimRight(string(l), "\r\n"), nil
}

func (d *dechunker) Read(p []byte) (int, error) {
	for d.left == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if d.done {
			return 0, io.EOF
		}
		if err := d.next(); err != nil {
			d.err = err
			return 0, err
		}
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.r.Read(p)
	d.left -= int64(n)
	if d.sum != nil {
		d.sum.Write(p[:n])
	}
	if d.left == 0 && err == nil {
		// The data's CRLF.
		if l, lerr := d.line(); lerr != nil || l != "" {
			d.err = fmt.Errorf("%w: no CRLF after a chunk", errBadChunk)
		}
	}
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: %w", errBadChunk, io.ErrUnexpectedEOF)
	}
	return n, err
}

// next reads a chunk header; after the last chunk, the trailers.
func (d *dechunker) next() error {
	l, err := d.line()
	if err != nil {
		return err
	}
	sizeHex, _, _ := strings.Cut(l, ";")
	size, err := strconv.ParseInt(strings.TrimSpace(sizeHex), 16, 64)
	if err != nil || size < 0 {
		return fmt.Errorf("%w: chunk size %q", errBadChunk, sizeHex)
	}
	if size > 0 {
		d.left = size
		return nil
	}
	// Trailers until an empty line (or the end of the body).
	got := ""
	for range 64 {
		l, err := d.line()
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return err
		}
		if err != nil || l == "" {
			return d.end(got)
		}
		name, value, _ := strings.Cut(l, ":")
		if strings.EqualFold(strings.TrimSpace(name), d.trailer) {
			got = strings.TrimSpace(value)
		}
	}
	return fmt.Errorf("%w: too many trailers", errBadChunk)
}

// end checks the trailing checksum (got is the trailer's value).
func (d *dechunker) end(got string) error {
	if d.sum != nil {
		want := base64.StdEncoding.EncodeToString(d.sum.Sum(nil))
		switch {
		case got == "":
			return fmt.Errorf("%w: x-amz-trailer announces %s, and the body has no such trailer", errBadChecksum, d.trailer)
		case got != want:
			return fmt.Errorf("%w: %s is %s, the body's is %s", errBadChecksum, d.trailer, got, want)
		}
	}
	d.done = true
	return nil
}
