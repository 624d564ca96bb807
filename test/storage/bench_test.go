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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	// A shard route beside it: a FencedShardSet's shard "eu", owned by a
	// pod of its own, in a bucket of its own.
	shardBucket := ns + "-shards"
	g.Expect(store.CreateBucket(ctx, shardBucket)).To(Succeed())
	setLabels := map[string]string{"app": "bench-shards"}
	g.Expect(env.Client.Create(ctx, &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-shards"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: setLabels}, Keys: []string{"eu"},
			LeaseDurationSeconds: 15, JoinDelaySeconds: ptr.To[int32](0)}})).To(Succeed())
	owner := readyPod(t, ns, "owner", setLabels, time.Hour)
	_, shardFence := shardOwner(g, ns, "bench-shards", "eu", owner)
	ownerToken, err := testenv.PodToken(ctx, env.Config, owner)
	g.Expect(err).NotTo(HaveOccurred())
	gw := startGateway(t, []gateway.Route{{Bucket: bucket, Namespace: ns, FencedLease: "bench"},
		{Bucket: shardBucket, Prefix: "s/", Namespace: ns, FencedShardSet: "bench-shards"}}, nil)

	body := strings.Repeat("x", 1024)
	direct := store.Client("")
	client := func(token string, fence int64) *s3.Client {
		return s3.New(s3.Options{Region: s3server.Region, BaseEndpoint: aws.String(gw.URL), UsePathStyle: true,
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "unused", SecretAccessKey: "unused"}, nil
			}),
		}, s3.WithAPIOptions(smithyhttp.AddHeaderValue(gateway.HeaderToken, token), smithyhttp.AddHeaderValue(gateway.HeaderFence, strconv.FormatInt(fence, 10))))
	}
	through := client(token, f)

	measureIn := func(bucket, key string, c *s3.Client, put bool) []time.Duration {
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
			g.Expect(err).NotTo(HaveOccurred(), key)
			if i >= 50 { // warm-up
				out = append(out, took)
			}
		}
		slices.Sort(out)
		return out
	}
	measure := func(name string, c *s3.Client, put bool) []time.Duration {
		return measureIn(bucket, "bench/"+name, c, put)
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
	// The same PUT through the shard route, against the direct PUT
	// measured again beside it.
	d := measure("direct-PUT-again", direct, true)
	sh := measureIn(shardBucket, "s/eu/bench", client(ownerToken, shardFence), true)
	r := func(x time.Duration) string { return x.Round(10 * time.Microsecond).String() }
	fmt.Fprintf(&table, "| PUT 1 KiB, shard route | %s | %s | %s | %s | %s | %s |\n", r(pct(d, .5)), r(pct(sh, .5)), r(pct(sh, .5)-pct(d, .5)),
		r(pct(d, .99)), r(pct(sh, .99)), r(pct(sh, .99)-pct(d, .99)))
	t.Logf("%d sequential requests each (after 50 of warm-up):\n%s", benchRounds, table.String())
}
