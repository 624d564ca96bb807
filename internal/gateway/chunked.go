package gateway

import (
	"bufio"
	"errors"
	"fmt"
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
// Chunk signatures and trailers are dropped. Memory is bounded whatever
// the body holds.
type dechunker struct {
	r    *bufio.Reader
	left int64
	done bool
	err  error
}

func newDechunker(r io.Reader) *dechunker { return &dechunker{r: bufio.NewReaderSize(r, maxChunkLine)} }

var errBadChunk = errors.New("malformed aws-chunked body")

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

// next reads a chunk header; the last chunk's trailers are skipped.
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
	for range 64 {
		l, err := d.line()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				d.done = true
				return nil
			}
			return err
		}
		if l == "" {
			d.done = true
			return nil
		}
	}
	return fmt.Errorf("%w: too many trailers", errBadChunk)
}
