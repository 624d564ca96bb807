package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/internal/gateway"
)

// gatewayClient is the AWS SDK for Go's S3 client configured as
// docs/storage.md tells a user to: the gateway as endpoint, path-style
// addressing, the pod's token and fence as two headers on every request.
// Its own credentials are not the store's: the gateway signs what it sends.
func gatewayClient(endpoint, token string, fence int64) *s3.Client {
	return s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "pod", SecretAccessKey: "unused"}, nil
		}),
		APIOptions: []func(*middleware.Stack) error{
			smithyhttp.AddHeaderValue(gateway.HeaderToken, token),
			smithyhttp.AddHeaderValue(gateway.HeaderFence, strconv.FormatInt(fence, 10)),
		},
		HTTPClient: newHTTPClient(),
	})
}

// TestAWSSDKThroughTheGateway: a real S3 client, unchanged but for its
// configuration, puts, gets, lists, copies and deletes through the
// gateway, and puts a 24 MiB object in one request (the SDK's default
// streaming upload: aws-chunked with a trailing checksum). A stale fence
// gets the gateway's error code through the SDK's error type.
func TestAWSSDKThroughTheGateway(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHandover(t, "sdk")
	gw := startGateway(t, h.routes(), nil)
	c := gatewayClient(gw.URL, h.a.hTok, h.a.fence)
	bucket := aws.String(h.bucket)

	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("reports/a.csv"), Body: bytes.NewReader([]byte("a,b\n1,2\n"))})
	g.Expect(err).NotTo(HaveOccurred())
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: aws.String("reports/a.csv")})
	g.Expect(err).NotTo(HaveOccurred())
	data, _ := io.ReadAll(out.Body)
	_ = out.Body.Close()
	g.Expect(string(data)).To(Equal("a,b\n1,2\n"))

	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: bucket, Key: aws.String("reports/b.csv"), CopySource: aws.String(h.bucket + "/reports/a.csv")})
	g.Expect(err).NotTo(HaveOccurred())
	large := bytes.Repeat([]byte("0123456789abcdef"), 24<<16)
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("reports/large.bin"), Body: bytes.NewReader(large)})
	g.Expect(err).NotTo(HaveOccurred())
	content, meta := storedObject(ctx, h.bucket, "reports/large.bin")
	g.Expect(len(content)).To(Equal(len(large)))
	g.Expect(meta).To(HaveKeyWithValue(gateway.MetaFence, strconv.FormatInt(h.a.fence, 10)))

	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String("reports/")})
	g.Expect(err).NotTo(HaveOccurred())
	var keys []string
	for _, o := range list.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	g.Expect(keys).To(ConsistOf("reports/a.csv", "reports/b.csv", "reports/large.bin"))

	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: bucket, Key: aws.String("reports/b.csv")})
	g.Expect(err).NotTo(HaveOccurred())
	list, err = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String("reports/")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Contents).To(HaveLen(2), "a deleted object is not listed (its tombstone is left out)")

	h.takeover(g)
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("reports/a.csv"), Body: bytes.NewReader([]byte("stale"))})
	var re *smithyhttp.ResponseError
	g.Expect(errors.As(err, &re)).To(BeTrue(), "%v", err)
	g.Expect(re.HTTPStatusCode()).To(Equal(403))
	g.Expect(err.Error()).To(ContainSubstring("FencedLeaseStaleFence"))
	nb := gatewayClient(gw.URL, h.b.hTok, h.b.fence)
	_, err = nb.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("reports/a.csv"), Body: bytes.NewReader([]byte("by B"))})
	g.Expect(err).NotTo(HaveOccurred())
}
