package storage_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/s3server"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// answer is an S3 error code ("" on success) and the HTTP status.
type answer struct {
	code   string
	status int
}

var ok = answer{"", http.StatusOK}

// gatewayPut writes through a gateway as the pod with token, with fence.
func gatewayPut(ctx context.Context, url, bucket, key, token string, f int64, content string) answer {
	c := s3.New(s3.Options{Region: s3server.Region, BaseEndpoint: aws.String(url), UsePathStyle: true, Retryer: aws.NopRetryer{},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "unused", SecretAccessKey: "unused"}, nil
		})})
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(content)},
		s3.WithAPIOptions(smithyhttp.AddHeaderValue(gateway.HeaderToken, token), smithyhttp.AddHeaderValue(gateway.HeaderFence, strconv.FormatInt(f, 10))))
	if err == nil {
		return ok
	}
	var ae smithy.APIError
	var re *smithyhttp.ResponseError
	if errors.As(err, &ae) && errors.As(err, &re) {
		return answer{ae.ErrorCode(), re.HTTPStatusCode()}
	}
	return answer{err.Error(), 0}
}

// grantOf waits for the Lease to be held by the pod and returns its fence.
func grantOf(g Gomega, ns, name string, pod *corev1.Pod) int64 {
	var f int64
	g.Eventually(func() error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(context.Background(), keyOf(ns, name), l); err != nil {
			return err
		}
		gr, err := gateway.ReadGrant(l, name)
		if err != nil {
			return err
		}
		if gr.HolderUID != pod.UID {
			return errors.New("held by " + gr.HolderPod)
		}
		f = gr.Fence
		return nil
	}).WithTimeout(timeout).Should(Succeed())
	return f
}

// TestReplicasConditionalWrite is the race between two gateway replicas
// that the stored fence and the conditional write close. Replica 1 admits
// A's write (A holds the grant); then a request of that write is held on
// its way to the store while the grant moves to B and B writes through
// replica 2; then it goes on.
//
//   - The HEAD held (before the check): replica 1 reads B's object and its
//     fence, higher than A's: 403 FencedLeaseStaleFence (object fence).
//   - The PUT held (after the check): its If-Match no longer holds, the
//     store refuses it, replica 1 answers 503 SlowDown; A's retry (what an
//     SDK does after a 503) is rejected as stale.
//
// Either way B's report stays.
func TestReplicasConditionalWrite(t *testing.T) {
	needsServers(t)
	for _, tc := range []struct {
		held   string
		late   answer
		reason string
	}{
		{held: http.MethodHead, late: answer{"FencedLeaseStaleFence", http.StatusForbidden}, reason: "object_fence_regression"},
		{held: http.MethodPut, late: answer{"SlowDown", http.StatusServiceUnavailable}, reason: "contention"},
	} {
		t.Run(tc.held, func(t *testing.T) { replicasRace(t, tc.held, tc.late, tc.reason) })
	}
}

func replicasRace(t *testing.T, held string, late answer, reason string) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "replicas")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "exporter"}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "exporter", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		fl.Spec.LeaseDurationSeconds = 3
	}))).To(Succeed())
	a := readyPod(t, ns, "a", labels, time.Hour)
	b := readyPod(t, ns, "b", labels, time.Minute)
	tokA, err := testenv.PodToken(ctx, env.Config, a)
	g.Expect(err).NotTo(HaveOccurred())
	tokB, err := testenv.PodToken(ctx, env.Config, b)
	g.Expect(err).NotTo(HaveOccurred())
	routes := []gateway.Route{{Bucket: bucket, Namespace: ns, FencedLease: "exporter"}}
	slow := s3server.NewDropProxy(store.Endpoint)
	t.Cleanup(slow.Close)
	r1 := startGatewayTo(t, slow.URL, routes, nil)
	r2 := startGateway(t, routes, nil)

	fa := grantOf(g, ns, "exporter", a)
	g.Expect(gatewayPut(ctx, r2.URL, bucket, reportKey, tokA, fa, "draft by A")).To(Equal(ok))

	waiting, release := slow.Hold(func(r *http.Request) bool { return r.Method == held })
	defer release()
	lateA := make(chan answer, 1)
	go func() { lateA <- gatewayPut(ctx, r1.URL, bucket, reportKey, tokA, fa, "late report by A") }()
	select {
	case <-waiting:
	case <-time.After(timeout):
		t.Fatal("A's write did not reach the store")
	}

	g.Expect(testenv.SetContainersNotReady(ctx, env.Client, a)).To(Succeed())
	fb := grantOf(g, ns, "exporter", b)
	g.Expect(gatewayPut(ctx, r2.URL, bucket, reportKey, tokB, fb, "report by B")).To(Equal(ok))
	release()
	g.Expect(<-lateA).To(Equal(late))

	out, err := store.Client("").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(reportKey)})
	g.Expect(err).NotTo(HaveOccurred())
	data, _ := io.ReadAll(out.Body)
	_ = out.Body.Close()
	g.Expect(string(data)).To(Equal("report by B"))
	g.Expect(out.Metadata).To(HaveKeyWithValue(gateway.MetaFence, strconv.FormatInt(fb, 10)))
	result := "denied"
	if reason == "contention" {
		result = "error"
	}
	g.Expect(counter(g, r1, "put", result, reason)).To(Equal(1.0))

	// What an SDK does after a 503: send again. Now A is simply stale.
	g.Expect(gatewayPut(ctx, r1.URL, bucket, reportKey, tokA, fa, "late report by A")).To(Equal(answer{"FencedLeaseStaleFence", http.StatusForbidden}))
}
