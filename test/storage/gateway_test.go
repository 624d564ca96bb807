package storage_test

import (
	"context"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// s3Error is an S3 error response body.
type s3Error struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// raw sends a request to the gateway as a plain HTTP client would (the
// gateway does not check an SDK signature).
func raw(g Gomega, method, url string, header map[string]string, body string) (int, http.Header, string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

func errorOf(g Gomega, body string) s3Error {
	var e s3Error
	g.Expect(xml.Unmarshal([]byte(body), &e)).To(Succeed(), body)
	return e
}

// TestGatewayOperations: through the gateway, the holder writes, copies,
// deletes, reads and lists; a standby reads but cannot copy or delete; a
// forged stored fence is replaced; and bad input (no token, a malformed or
// forged token, a malformed fence, an unrouted key, a multipart upload, a
// pod of another namespace) gets a clear S3 error and changes nothing.
func TestGatewayOperations(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "gwops")
	other := namespace(t, "gwother")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "exporter"}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "exporter", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 15
	}))).To(Succeed())
	holder := readyPod(t, ns, "holder", labels, time.Hour)
	standby := readyPod(t, ns, "standby", labels, time.Minute)
	stranger := readyPod(t, other, "stranger", map[string]string{"app": "x"}, time.Minute)
	f := grantOf(g, ns, "exporter", holder)
	fs := strconv.FormatInt(f, 10)
	hTok, err := testenv.PodToken(ctx, env.Config, holder)
	g.Expect(err).NotTo(HaveOccurred())
	sTok, err := testenv.PodToken(ctx, env.Config, standby)
	g.Expect(err).NotTo(HaveOccurred())
	xTok, err := testenv.PodToken(ctx, env.Config, stranger)
	g.Expect(err).NotTo(HaveOccurred())
	gw := startGateway(t, []gateway.Route{{Bucket: bucket, Prefix: "reports/", Namespace: ns, FencedLease: "exporter"}}, nil)
	obj := gw.URL + "/" + bucket + "/reports/a.csv"
	as := func(token, fence string, more ...string) map[string]string {
		h := map[string]string{gateway.HeaderToken: token}
		if fence != "" {
			h[gateway.HeaderFence] = fence
		}
		for i := 0; i+1 < len(more); i += 2 {
			h[more[i]] = more[i+1]
		}
		return h
	}
	stored := func(key string) (string, map[string]string) {
		out, err := store.Client("").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			return "<absent>", nil
		}
		defer out.Body.Close()
		data, _ := io.ReadAll(out.Body)
		return string(data), out.Metadata
	}

	// The holder writes; a forged stored fence in its metadata is replaced.
	status, _, body := raw(g, http.MethodPut, obj, as(hTok, fs, "X-Amz-Meta-Fencedlease-Fence", "99999999", "X-Amz-Meta-Owner", "me", "Content-Type", "text/csv"), "v1")
	g.Expect(status).To(Equal(http.StatusOK), body)
	content, meta := stored("reports/a.csv")
	g.Expect(content).To(Equal("v1"))
	g.Expect(meta).To(Equal(map[string]string{gateway.MetaFence: fs, "owner": "me"}))

	// Streaming uploads in S3's aws-chunked encoding, with chunk signatures
	// (the caller's, useless upstream) or a trailing checksum: the gateway
	// forwards the data only, re-signed.
	big := strings.Repeat("0123456789", 10000)
	crc := crc32.ChecksumIEEE([]byte(big))
	sum := base64.StdEncoding.EncodeToString([]byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	for _, tc := range []struct{ sha, sep, trailer string }{
		{"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", ";chunk-signature=" + strings.Repeat("0", 64), ""},
		{"STREAMING-UNSIGNED-PAYLOAD-TRAILER", "", "x-amz-checksum-crc32:" + sum + "\r\n"},
	} {
		chunked := fmt.Sprintf("%x%s\r\n%s\r\n%x%s\r\n%s\r\n0%s\r\n%s\r\n", 65536, tc.sep, big[:65536], len(big)-65536, tc.sep, big[65536:], tc.sep, tc.trailer)
		h := as(hTok, fs, "X-Amz-Content-Sha256", tc.sha, "Content-Encoding", "aws-chunked", "X-Amz-Decoded-Content-Length", strconv.Itoa(len(big)))
		if tc.trailer != "" {
			h["X-Amz-Trailer"] = "x-amz-checksum-crc32"
		}
		status, _, body := raw(g, http.MethodPut, gw.URL+"/"+bucket+"/reports/streamed.csv", h, chunked)
		g.Expect(status).To(Equal(http.StatusOK), body)
		content, meta := stored("reports/streamed.csv")
		g.Expect(content).To(Equal(big), tc.sha)
		g.Expect(meta).To(HaveKeyWithValue(gateway.MetaFence, fs))
	}

	// Reads pass through for pods of the namespace, standby included.
	status, _, body = raw(g, http.MethodGet, obj, as(sTok, ""), "")
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("v1"))
	status, _, body = raw(g, http.MethodGet, gw.URL+"/"+bucket+"?list-type=2&prefix=reports/", as(sTok, ""), "")
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("<Key>reports/a.csv</Key>"))

	// Copy by the holder: the copy carries the holder's fence.
	status, _, body = raw(g, http.MethodPut, gw.URL+"/"+bucket+"/reports/b.csv", as(hTok, fs, "X-Amz-Copy-Source", "/"+bucket+"/reports/a.csv"), "")
	g.Expect(status).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring("<CopyObjectResult>"))
	content, meta = stored("reports/b.csv")
	g.Expect(content).To(Equal("v1"))
	g.Expect(meta).To(HaveKeyWithValue(gateway.MetaFence, fs))
	g.Expect(meta).To(HaveKeyWithValue("owner", "me"))

	// Refusals: each leaves a.csv and b.csv as they are.
	notHolder := "write to " + bucket + "/reports/%s with fence " + fs + " denied: pod standby (UID " + string(standby.UID) +
		") is not the holder, FencedLease " + ns + "/exporter is held with fence " + fs + " by pod holder (UID " + string(holder.UID) + ")"
	for _, tc := range []struct {
		name    string
		method  string
		url     string
		header  map[string]string
		status  int
		code    string
		message string
	}{
		{"standby deletes", http.MethodDelete, obj, as(sTok, fs), 403, "NotHolder", strings.Replace(notHolder, "%s", "a.csv", 1)},
		{"standby copies", http.MethodPut, obj, as(sTok, fs, "X-Amz-Copy-Source", "/"+bucket+"/reports/b.csv"), 403, "NotHolder", strings.Replace(notHolder, "%s", "a.csv", 1)},
		{"holder with an old fence", http.MethodPut, obj, as(hTok, strconv.FormatInt(f-1, 10)), 403, "FencedLeaseStaleFence",
			"write to " + bucket + "/reports/a.csv with fence " + strconv.FormatInt(f-1, 10) + " denied: stale fence, FencedLease " + ns + "/exporter is held with fence " + fs + " by pod holder"},
		{"no token", http.MethodPut, obj, map[string]string{gateway.HeaderFence: fs}, 403, "MissingToken",
			"the request carries no X-Fencedlease-Token header: send the pod's service-account token"},
		{"forged token", http.MethodPut, obj, as("eyJhbGciOiJSUzI1NiJ9.e30.c2ln", fs), 403, "InvalidToken", ""},
		{"no fence", http.MethodPut, obj, as(hTok, ""), 400, "MissingFence",
			"write to " + bucket + "/reports/a.csv denied: it carries no X-Fencedlease-Fence header; FencedLease " + ns + "/exporter protects it"},
		{"malformed fence", http.MethodPut, obj, as(hTok, "0"+fs), 400, "InvalidFence",
			"write to " + bucket + "/reports/a.csv denied: header X-Fencedlease-Fence: invalid fence \"0" + fs + "\": leading zero (FencedLease " + ns + "/exporter)"},
		{"unrouted key", http.MethodPut, gw.URL + "/" + bucket + "/other/a.csv", as(hTok, fs), 403, "AccessDenied",
			"no route for " + bucket + "/other/a.csv: the gateway fences only routed keys"},
		{"pod of another namespace", http.MethodGet, obj, as(xTok, ""), 403, "AccessDenied",
			"read of " + bucket + "/reports/a.csv denied: it is routed to FencedLease " + ns + "/exporter, and user system:serviceaccount:" + other + ":default is not a service account of namespace " + ns},
		{"multipart", http.MethodPost, obj + "?uploads", as(hTok, fs), 501, "NotImplemented", gateway.MultipartRefusal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, _, body := raw(g, tc.method, tc.url, tc.header, "overwritten")
			g.Expect(status).To(Equal(tc.status), body)
			e := errorOf(g, body)
			g.Expect(e.Code).To(Equal(tc.code))
			if tc.message != "" {
				g.Expect(e.Message).To(Equal(tc.message))
			}
			a, _ := stored("reports/a.csv")
			b, _ := stored("reports/b.csv")
			g.Expect([]string{a, b}).To(Equal([]string{"v1", "v1"}), "nothing changed")
		})
	}

	// The holder deletes; a second DELETE of the deleted object is fine.
	// The store keeps a tombstone with the fence; through the gateway the
	// object is absent.
	for range 2 {
		status, _, body = raw(g, http.MethodDelete, obj, as(hTok, fs), "")
		g.Expect(status).To(Equal(http.StatusNoContent), body)
	}
	content, meta = stored("reports/a.csv")
	g.Expect(content).To(Equal(string(gateway.TombstoneBody(f))))
	g.Expect(meta).To(Equal(map[string]string{gateway.MetaFence: fs, gateway.MetaDeleted: "true"}))
	status, _, body = raw(g, http.MethodGet, obj, as(sTok, ""), "")
	g.Expect(status).To(Equal(http.StatusNotFound))
	g.Expect(errorOf(g, body).Code).To(Equal("NoSuchKey"))
}
