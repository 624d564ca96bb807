package storage_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/internal/gateway"
)

// chunked encodes data as an unsigned aws-chunked body, in chunks of 4
// bytes, with trailer lines (each "name:value") after the last chunk.
func chunked(data string, trailers ...string) string {
	var out string
	for i := 0; i < len(data); i += 4 {
		c := data[i:min(i+4, len(data))]
		out += fmt.Sprintf("%x\r\n%s\r\n", len(c), c)
	}
	out += "0\r\n"
	for _, t := range trailers {
		out += t + "\r\n"
	}
	return out + "\r\n"
}

func crc32Of(s string) string {
	c := crc32.ChecksumIEEE([]byte(s))
	return base64.StdEncoding.EncodeToString([]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)})
}

// TestStreamingBodies: an aws-chunked body is written only when its
// decoded length is the one announced and its trailing checksum matches
// (finding 9). A longer or shorter body, or a wrong checksum, is a 400
// before anything is written (before: stored truncated with 200, 502
// "outcome unknown", stored unchecked), and a trailer the gateway cannot
// check is refused with a message that says which it checks.
func TestStreamingBodies(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "streaming")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	tn := newTenant(t, ns, "exporter", nil)
	gw := startGateway(t, []gateway.Route{{Bucket: bucket, Namespace: ns, FencedLease: "exporter"}}, nil)
	obj := gw.URL + "/" + bucket + "/k"
	status, _, body := raw(g, http.MethodPut, obj, tn.holderHeaders(), "v1")
	g.Expect(status).To(Equal(http.StatusOK), body)

	data := "hello world"
	streaming := func(decoded int, trailer string) map[string]string {
		h := tn.holderHeaders("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "Content-Encoding", "aws-chunked",
			"X-Amz-Decoded-Content-Length", strconv.Itoa(decoded))
		if trailer != "" {
			h["X-Amz-Trailer"] = trailer
		}
		return h
	}
	for _, tc := range []struct {
		name          string
		header        map[string]string
		body          string
		code, message string
	}{
		{"longer than announced", streaming(5, ""), chunked(data), "InvalidRequest", "the body holds more than the 5 bytes announced"},
		{"shorter than announced", streaming(20, ""), chunked(data), "IncompleteBody", "the body ended after 11 bytes, 20 were announced"},
		{"wrong trailing checksum", streaming(len(data), "x-amz-checksum-crc32"), chunked(data, "x-amz-checksum-crc32:AAAAAA=="), "BadDigest",
			"trailing checksum mismatch: x-amz-checksum-crc32 is AAAAAA==, the body's is " + crc32Of(data) + " (nothing was written)"},
		{"no trailing checksum", streaming(len(data), "x-amz-checksum-crc32"), chunked(data), "BadDigest",
			"trailing checksum mismatch: x-amz-trailer announces x-amz-checksum-crc32, and the body has no such trailer (nothing was written)"},
		{"a trailer the gateway cannot check", streaming(len(data), "x-amz-checksum-md5"), chunked(data, "x-amz-checksum-md5:AAAA"), "InvalidArgument",
			`x-amz-trailer "x-amz-checksum-md5" is not a checksum the gateway verifies (x-amz-checksum-crc32, x-amz-checksum-crc32c, x-amz-checksum-crc64nvme, x-amz-checksum-sha1, x-amz-checksum-sha256); send the checksum as a header, or none`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, _, body := raw(g, http.MethodPut, obj, tc.header, tc.body)
			g.Expect(status).To(Equal(http.StatusBadRequest), body)
			e := errorOf(g, body)
			g.Expect(e.Code).To(Equal(tc.code))
			g.Expect(e.Message).To(Equal(tc.message))
			content, meta := storedObject(ctx, bucket, "k")
			g.Expect(content).To(Equal("v1"), "nothing was written")
			g.Expect(meta).To(HaveKeyWithValue(gateway.MetaFence, strconv.FormatInt(tn.fence, 10)))
		})
	}
	status, _, body = raw(g, http.MethodPut, obj, streaming(len(data), "x-amz-checksum-crc32"), chunked(data, "x-amz-checksum-crc32:"+crc32Of(data)))
	g.Expect(status).To(Equal(http.StatusOK), body)
	content, _ := storedObject(ctx, bucket, "k")
	g.Expect(content).To(Equal(data))
}

// TestStoreErrors: the store's answers mean what they say (finding 9). A
// 409 that is not a concurrent conditional write (versitygw's
// ObjectParentIsFile: k is a file, so k/child cannot be written) is the
// store's answer, not "503 SlowDown, send it again" forever; a 4xx on the
// gateway's read before a write (credentials the store refuses) is that
// refusal, saying that nothing was written, not a 502 "outcome unknown".
func TestStoreErrors(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "storeerrors")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	tn := newTenant(t, ns, "exporter", nil)
	routes := []gateway.Route{{Bucket: bucket, Namespace: ns, FencedLease: "exporter"}}
	gw := startGateway(t, routes, nil)
	status, _, body := raw(g, http.MethodPut, gw.URL+"/"+bucket+"/k", tn.holderHeaders(), "v1")
	g.Expect(status).To(Equal(http.StatusOK), body)

	status, _, body = raw(g, http.MethodPut, gw.URL+"/"+bucket+"/k/child", tn.holderHeaders(), "child")
	g.Expect(status).To(Equal(http.StatusConflict), body)
	g.Expect(errorOf(g, body).Code).To(Equal("ObjectParentIsFile"))
	g.Expect(counter(g, gw, "put", "error", "upstream_answer")).To(Equal(1.0))
	g.Expect(counter(g, gw, "put", "error", "contention")).To(BeZero())

	refused := startGatewayWith(t, store.Endpoint, routes, func(o *gateway.Options) {
		up, err := gateway.NewUpstream(store.Endpoint, "us-east-1", aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: store.AccessKey, SecretAccessKey: "wrong"}, nil
		}), newHTTPClient())
		g.Expect(err).NotTo(HaveOccurred())
		o.Upstream = up
	})
	status, _, body = raw(g, http.MethodPut, refused.URL+"/"+bucket+"/k", tn.holderHeaders(), "v2")
	g.Expect(status).To(Equal(http.StatusForbidden), body)
	e := errorOf(g, body)
	g.Expect(e.Code).To(Equal("AccessDenied"))
	g.Expect(e.Message).To(Equal("the store refused the gateway's read of the object (nothing was written): 403 Forbidden"))
	content, _ := storedObject(ctx, bucket, "k")
	g.Expect(content).To(Equal("v1"))
}
