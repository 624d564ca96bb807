package s3server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/s3server"
)

// status is the HTTP status of an S3 error, 200 for no error.
func status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return -1
}

// TestConditionalWrites checks what fenced storage relies on in the store:
// PUT with If-None-Match: * creates only an absent object, PUT and DELETE
// with If-Match change only the version with that ETag, both answer 412
// otherwise, and of concurrent conditional writes against one ETag exactly
// one wins. A store that ignored the conditions would fail here (every
// write would succeed), and neither the gateway nor fences3 could be safe
// on it.
func TestConditionalWrites(t *testing.T) {
	harness.Needs(t, harness.S3Server)
	g := NewWithT(t)
	ctx := context.Background()
	srv, err := s3server.Start(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(srv.Stop)
	g.Expect(srv.CreateBucket(ctx, "conditional")).To(Succeed())
	c := srv.Client("")
	put := func(key, body string, ifMatch, ifNoneMatch *string) (string, error) {
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("conditional"), Key: aws.String(key),
			Body: bytes.NewReader([]byte(body)), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.ETag), nil
	}
	del := func(key string, ifMatch *string) error {
		_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("conditional"), Key: aws.String(key), IfMatch: ifMatch})
		return err
	}

	e1, err := put("k", "one", nil, aws.String("*"))
	g.Expect(err).NotTo(HaveOccurred(), "create an absent object")
	_, err = put("k", "two", nil, aws.String("*"))
	g.Expect(status(err)).To(Equal(http.StatusPreconditionFailed), "If-None-Match: * on an existing object")
	_, err = put("k", "two", aws.String(`"00000000000000000000000000000000"`), nil)
	g.Expect(status(err)).To(Equal(http.StatusPreconditionFailed), "If-Match with another ETag")
	e2, err := put("k", "two", aws.String(e1), nil)
	g.Expect(err).NotTo(HaveOccurred(), "If-Match with the current ETag")
	_, err = put("k", "three", aws.String(e1), nil)
	g.Expect(status(err)).To(Equal(http.StatusPreconditionFailed), "If-Match with a replaced ETag")

	g.Expect(status(del("k", aws.String(e1)))).To(Equal(http.StatusPreconditionFailed), "DELETE If-Match with a replaced ETag")
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("conditional"), Key: aws.String("k")})
	g.Expect(err).NotTo(HaveOccurred(), "the object is still there")
	g.Expect(del("k", aws.String(e2))).To(Succeed(), "DELETE If-Match with the current ETag")
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("conditional"), Key: aws.String("k")})
	g.Expect(status(err)).To(Equal(http.StatusNotFound))

	// The ETag is a hash of the content (the MD5 of a single-part object,
	// as in AWS S3): writing the same bytes again gives the same ETag, so an
	// If-Match taken before such a rewrite still matches after it. The
	// gateway's atomicity argument must not rest on ETags being unique
	// (docs/storage.md); fences3's pointer bodies are unique by
	// construction.
	e3, err := put("same", "bytes", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	e4, err := put("same", "other bytes", aws.String(e3), nil)
	g.Expect(err).NotTo(HaveOccurred())
	e5, err := put("same", "bytes", aws.String(e4), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e5).To(Equal(e3), "the same bytes, the same ETag")

	// Races: of 8 concurrent creates, and then of 8 concurrent updates
	// against the same ETag, exactly one succeeds.
	for round := range 10 {
		key := fmt.Sprintf("race-%d", round)
		race := func(phase string, ifMatch, ifNoneMatch *string) int32 {
			var won atomic.Int32
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					if _, err := put(key, fmt.Sprintf("%s-%d-%d", phase, round, i), ifMatch, ifNoneMatch); err == nil {
						won.Add(1)
					}
				})
			}
			wg.Wait()
			return won.Load()
		}
		g.Expect(race("create", nil, aws.String("*"))).To(Equal(int32(1)), "concurrent creates")
		head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("conditional"), Key: aws.String(key)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(race("update", head.ETag, nil)).To(Equal(int32(1)), "concurrent updates of one version")
	}
}
