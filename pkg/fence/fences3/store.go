package fences3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// API is what Store uses of an S3 client; *s3.Client has it.
type API interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, optFns ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
}

// User metadata of a version object (x-amz-meta-...): who wrote it, so that
// a second attempt of the same operation recognises it.
const (
	MetaFence  = "fencedlease-fence"
	MetaOpID   = "fencedlease-op"
	MetaSHA256 = "fencedlease-sha256"
	// MetaBaseSeq is the sequence number of the pointer that the first
	// attempt of the operation read before it wrote its version: a move by
	// the operation has a higher one.
	MetaBaseSeq = "fencedlease-base-seq"
)

// DefaultAttempts bounds the rounds of Put: moves of the pointer lost to
// other writers, and writes whose outcome was settled as "not applied".
const DefaultAttempts = 10

// Store makes fenced writes to the objects of one bucket.
type Store struct {
	client API
	bucket string
	// Attempts bounds the rounds of one Put; DefaultAttempts when 0.
	Attempts int
}

// New returns a Store for the bucket.
func New(client API, bucket string) *Store {
	return &Store{client: client, bucket: bucket}
}

// noRetry turns off the SDK's own retries for writes: a write whose reply
// was lost is settled by reading back, never by sending it again blindly.
func noRetry(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

// Put writes body as the new current version of key, with the writer's
// fence, as operation opID. It returns the pointer as this write left it.
//
// Errors (test them with errors.Is): ErrStale when a higher fence has
// written key (nothing changed); ErrAlreadyApplied when opID was applied
// before under this fence (nothing changed; treat it as success);
// ErrUnknownOutcome when a lost reply could not be settled (replay with the
// same opID and fence); ErrOutcomeLost when a replay cannot be told from a
// second application any more (nothing changed; the operation may have been
// applied); ErrOperationReused, ErrMalformedPointer, ErrContention; or the
// store's error.
func (s *Store) Put(ctx context.Context, key, opID string, fenceValue int64, body io.ReadSeeker) (Pointer, error) {
	if key == "" || opID == "" {
		return Pointer{}, fmt.Errorf("put %q as operation %q: key and operation ID must not be empty", key, opID)
	}
	if _, err := fence.ParseFence(strconv.FormatInt(fenceValue, 10)); err != nil {
		return Pointer{}, fmt.Errorf("put %s: %w", key, err)
	}
	w := &write{s: s, key: key, opID: opID, fence: fenceValue, body: body, version: VersionKey(key, opID, fenceValue)}
	p, err := w.run(ctx)
	if err != nil {
		return Pointer{}, fmt.Errorf("put %s/%s with fence %d as operation %q: %w", s.bucket, key, fenceValue, opID, err)
	}
	return p, nil
}

// Current returns the pointer of key and its ETag; ErrNotFound when key has
// never been written.
func (s *Store) Current(ctx context.Context, key string) (Pointer, error) {
	p, _, err := s.readPointer(ctx, key)
	if err != nil {
		return Pointer{}, fmt.Errorf("read pointer %s/%s: %w", s.bucket, key, err)
	}
	if p == nil {
		return Pointer{}, fmt.Errorf("read pointer %s/%s: %w", s.bucket, key, ErrNotFound)
	}
	return *p, nil
}

// Get resolves the pointer of key and opens its current version. The
// caller closes the body.
func (s *Store) Get(ctx context.Context, key string) (Pointer, io.ReadCloser, error) {
	var lastErr error
	for range 3 {
		p, err := s.Current(ctx, key)
		if err != nil {
			return Pointer{}, nil, err
		}
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(p.Version)})
		if err == nil {
			return p, out.Body, nil
		}
		if statusOf(err) != http.StatusNotFound {
			return Pointer{}, nil, fmt.Errorf("get version %s/%s: %w", s.bucket, p.Version, err)
		}
		// Expired by a lifecycle rule after the pointer moved on: read the
		// pointer again.
		lastErr = err
	}
	return Pointer{}, nil, fmt.Errorf("get %s/%s: the version named by the pointer is gone: %w", s.bucket, key, lastErr)
}

// readPointer returns the pointer of key and its ETag; nil when there is
// none.
func (s *Store) readPointer(ctx context.Context, key string) (*Pointer, string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, "", nil
		}
		return nil, "", err
	}
	defer out.Body.Close()
	data, err := io.ReadAll(io.LimitReader(out.Body, maxPointerSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("read pointer %s: %w", key, err)
	}
	if len(data) > maxPointerSize {
		return nil, "", fmt.Errorf("pointer %s: %w: larger than %d bytes", key, ErrMalformedPointer, maxPointerSize)
	}
	p, err := decodePointer(key, data)
	if err != nil {
		return nil, "", err
	}
	return &p, aws.ToString(out.ETag), nil
}

// statusOf is the HTTP status of an S3 error answer, 0 when no answer came.
func statusOf(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		return re.HTTPStatusCode()
	}
	return 0
}

// outcome classifies a write's error.
type outcome int

const (
	applied outcome = iota
	// lostRace: the store refused the condition (412, or 409 for a
	// concurrent conditional write); nothing was written.
	lostRace
	// unknown: no answer, or a server error: the write may have applied.
	unknown
	// refused: any other answer: nothing was written.
	refused
)

func classify(err error) outcome {
	switch code := statusOf(err); {
	case err == nil:
		return applied
	case code == http.StatusPreconditionFailed || code == http.StatusConflict:
		return lostRace
	case code == 0 || code >= 500:
		return unknown
	default:
		return refused
	}
}

// digest returns the hex SHA-256 of the body and rewinds it.
func digest(body io.ReadSeeker) (string, error) {
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, body); err != nil {
		return "", err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// putPointer writes p as the pointer of key, if its ETag is still etag
// (absent when etag is empty).
func (s *Store) putPointer(ctx context.Context, key, etag string, p Pointer) error {
	data, err := p.encode()
	if err != nil {
		return err
	}
	in := &s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key), Body: bytes.NewReader(data),
		ContentType: aws.String("application/json"),
		Metadata:    map[string]string{MetaFence: strconv.FormatInt(p.Fence, 10), MetaOpID: p.OpID}}
	if etag == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	_, err = s.client.PutObject(ctx, in, noRetry)
	return err
}
