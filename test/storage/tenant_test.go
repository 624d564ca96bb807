package storage_test

import (
	"context"
	"io"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// tenant is a FencedLease with a holder pod and a standby pod, and their
// tokens, as the gateway's tests use it.
type tenant struct {
	ns, name        string
	holder, standby *corev1.Pod
	hTok, sTok      string
	fence           int64
}

// newTenant creates a FencedLease name in ns (operator renewal, the mutate
// applied), a holder pod and a standby, and waits for the grant.
func newTenant(t *testing.T, ns, name string, mutate func(*fencingv1alpha1.FencedLease)) *tenant {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	labels := map[string]string{"app": name}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, name, labels, mutate))).To(Succeed())
	tn := &tenant{ns: ns, name: name}
	tn.holder = readyPod(t, ns, name+"-holder", labels, time.Hour)
	tn.standby = readyPod(t, ns, name+"-standby", labels, time.Minute)
	tn.fence = grantOf(g, ns, name, tn.holder)
	var err error
	tn.hTok, err = testenv.PodToken(ctx, env.Config, tn.holder)
	g.Expect(err).NotTo(HaveOccurred())
	tn.sTok, err = testenv.PodToken(ctx, env.Config, tn.standby)
	g.Expect(err).NotTo(HaveOccurred())
	return tn
}

// as are the headers of a request by the pod with token, with fence when
// it is not "", and more header pairs.
func as(token, fence string, more ...string) map[string]string {
	h := map[string]string{gateway.HeaderToken: token}
	if fence != "" {
		h[gateway.HeaderFence] = fence
	}
	for i := 0; i+1 < len(more); i += 2 {
		h[more[i]] = more[i+1]
	}
	return h
}

// holderHeaders are the headers of a write by the tenant's holder.
func (tn *tenant) holderHeaders(more ...string) map[string]string {
	return as(tn.hTok, strconv.FormatInt(tn.fence, 10), more...)
}

// storedObject reads an object straight from the store: its content
// ("<absent>" when there is none) and user metadata.
func storedObject(ctx context.Context, bucket, key string) (string, map[string]string) {
	out, err := store.Client("").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "<absent>", nil
	}
	defer out.Body.Close()
	data, _ := io.ReadAll(out.Body)
	return string(data), out.Metadata
}

// storedKeys lists every key of a bucket straight from the store.
func storedKeys(ctx context.Context, g Gomega, bucket string) []string {
	var keys []string
	p := s3.NewListObjectsV2Paginator(store.Client(""), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	sort.Strings(keys)
	return keys
}
