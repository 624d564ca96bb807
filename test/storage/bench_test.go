//go:build bench

package storage_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/s3server"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// benchRounds is the number of sequential requests per measurement.
const benchRounds = 1000

// TestGatewayLatency measures what the fence gateway adds to a PUT and a
// GET of a 1 KiB object: the same requests from the same SDK client, once
// straight to the store and once through the gateway, one at a time, p50
// and p99 of each (make bench-storage; docs/storage.md has the numbers).
func TestGatewayLatency(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "bench")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "bench"}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "bench", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 15
	}))).To(Succeed())
	pod := readyPod(t, ns, "holder", labels, time.Hour)
	f := grantOf(g, ns, "bench", pod)
	token, err := testenv.PodToken(ctx, env.Config, pod)
	g.Expect(err).NotTo(HaveOccurred())
	gw := startGateway(t, []gateway.Route{{Bucket: bucket, Namespace: ns, FencedLease: "bench"}}, nil)

	body := strings.Repeat("x", 1024)
	direct := store.Client("")
	through := s3.New(s3.Options{Region: s3server.Region, BaseEndpoint: aws.String(gw.URL), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "unused", SecretAccessKey: "unused"}, nil
		}),
	}, s3.WithAPIOptions(smithyhttp.AddHeaderValue(gateway.HeaderToken, token), smithyhttp.AddHeaderValue(gateway.HeaderFence, strconv.FormatInt(f, 10))))

	measure := func(name string, c *s3.Client, put bool) []time.Duration {
		key := "bench/" + name
		if !put {
			_, err := direct.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
			g.Expect(err).NotTo(HaveOccurred())
		}
		out := make([]time.Duration, 0, benchRounds)
		for i := range benchRounds + 50 {
			start := time.Now()
			if put {
				_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
			} else {
				var o *s3.GetObjectOutput
				if o, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
					_, err = io.Copy(io.Discard, o.Body)
					_ = o.Body.Close()
				}
			}
			took := time.Since(start)
			g.Expect(err).NotTo(HaveOccurred(), name)
			if i >= 50 { // warm-up
				out = append(out, took)
			}
		}
		slices.Sort(out)
		return out
	}
	pct := func(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	var table strings.Builder
	fmt.Fprintf(&table, "| request | direct p50 | gateway p50 | added p50 | direct p99 | gateway p99 | added p99 |\n|---|---|---|---|---|---|---|\n")
	for _, put := range []bool{true, false} {
		name := "GET"
		if put {
			name = "PUT"
		}
		d := measure("direct-"+name, direct, put)
		gws := measure("gateway-"+name, through, put)
		r := func(x time.Duration) string { return x.Round(10 * time.Microsecond).String() }
		fmt.Fprintf(&table, "| %s 1 KiB | %s | %s | %s | %s | %s | %s |\n", name, r(pct(d, .5)), r(pct(gws, .5)), r(pct(gws, .5)-pct(d, .5)),
			r(pct(d, .99)), r(pct(gws, .99)), r(pct(gws, .99)-pct(d, .99)))
	}
	t.Logf("%d sequential requests each (after 50 of warm-up):\n%s", benchRounds, table.String())
}
