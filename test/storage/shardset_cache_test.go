package storage_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// setReads counts the gateway's reads of FencedShardSets.
type setReads struct {
	client.Reader
	n atomic.Int32
}

func (r *setReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*fencingv1alpha1.FencedShardSet); ok {
		r.n.Add(1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestShardRouteReadsTheSetOnlyWhenItMust: a shard route reads
// the shard's Lease on every write, and the FencedShardSet from a cache,
// read again only when the cached set lacks the key or does not control
// the Lease. On a real API server, with the pod's own token: five writes
// read the set once; a key added to the set is written at once; a write
// after the set was deleted and created again is judged by the new set
// (the old fence refused, the new one accepted); a shard removed from the
// set is refused at once, its Lease gone, though the cached set still
// lists it.
func TestShardRouteReadsTheSetOnlyWhenItMust(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "gwsetcache")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "tenants"}
	newSet := func(keys ...string) *fencingv1alpha1.FencedShardSet {
		return &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenants"},
			Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: labels}, Keys: keys,
				LeaseDurationSeconds: 5, JoinDelaySeconds: ptr.To[int32](0)}}
	}
	g.Expect(env.Client.Create(ctx, newSet("eu"))).To(Succeed())
	a := readyPod(t, ns, "a", labels, time.Hour)
	_, eu := shardOwner(g, ns, "tenants", "eu", a)
	tok, err := testenv.PodToken(ctx, env.Config, a)
	g.Expect(err).NotTo(HaveOccurred())

	kube, err := kubernetes.NewForConfig(gatewayConfig)
	g.Expect(err).NotTo(HaveOccurred())
	direct, err := client.New(gatewayConfig, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	reads := &setReads{Reader: direct}
	gw := startGatewayWith(t, store.Endpoint, []gateway.Route{{Bucket: bucket, Prefix: "t/", Namespace: ns, FencedShardSet: "tenants"}},
		func(o *gateway.Options) {
			o.Grants = &gateway.GrantReader{Kube: kube, Client: reads, FencedLeaseTTL: time.Hour, MaxFencedLeases: 64}
		})
	put := func(fence int64, key string) (int, s3Error) {
		status, _, resp := raw(g, http.MethodPut, gw.URL+"/"+bucket+"/"+key,
			map[string]string{gateway.HeaderToken: tok, gateway.HeaderFence: strconv.FormatInt(fence, 10)}, "by a")
		if status == http.StatusOK {
			return status, s3Error{}
		}
		return status, errorOf(g, resp)
	}

	for i := range 5 {
		status, e := put(eu, "t/eu/"+strconv.Itoa(i))
		g.Expect(status).To(Equal(http.StatusOK), e.Message)
	}
	g.Expect(reads.n.Load()).To(Equal(int32(1)), "five writes, one read of the set")

	// A key added to the set: the cached set lacks it, so it is read again.
	s := &fencingv1alpha1.FencedShardSet{}
	g.Expect(env.Client.Get(ctx, keyOf(ns, "tenants"), s)).To(Succeed())
	s.Spec.Keys = []string{"eu", "us"}
	g.Expect(env.Client.Update(ctx, s)).To(Succeed())
	_, us := shardOwner(g, ns, "tenants", "us", a)
	status, e := put(us, "t/us/0")
	g.Expect(status).To(Equal(http.StatusOK), e.Message)
	g.Expect(reads.n.Load()).To(Equal(int32(2)))

	// The set deleted and created again: its shard's new Lease is
	// controlled by the new set, which the cache does not know.
	g.Expect(env.Client.Delete(ctx, s)).To(Succeed())
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, keyOf(ns, "tenants"), &fencingv1alpha1.FencedShardSet{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).Should(BeTrue())
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, keyOf(ns, record.ShardLeaseName("tenants", "eu")), &coordinationv1.Lease{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).Should(BeTrue(), "the old set's Leases go with it")
	g.Expect(env.Client.Create(ctx, newSet("eu"))).To(Succeed())
	_, eu2 := shardOwner(g, ns, "tenants", "eu", a)
	g.Expect(eu2).To(BeNumerically(">", eu))
	status, e = put(eu, "t/eu/old")
	g.Expect(status).To(Equal(http.StatusForbidden), "the old set's fence")
	g.Expect(e.Code).To(Equal(gateway.CodeStaleFence))
	reRead := reads.n.Load()
	g.Expect(reRead).To(BeNumerically(">", int32(2)), "the Lease names another set: the set is read again")
	status, e = put(eu2, "t/eu/new")
	g.Expect(status).To(Equal(http.StatusOK), e.Message)

	// us is no shard of the new set: the cached set says so only after a
	// read, and the refusal names the set.
	status, e = put(us, "t/us/1")
	g.Expect(status).To(Equal(http.StatusBadRequest))
	g.Expect(e.Code).To(Equal(gateway.CodeNoSuchShard))

	// A shard removed while the cached set still lists it: its grant is
	// revoked and its Lease deleted, and the write is refused without
	// another read.
	s = &fencingv1alpha1.FencedShardSet{}
	g.Expect(env.Client.Get(ctx, keyOf(ns, "tenants"), s)).To(Succeed())
	s.Spec.Keys = []string{"eu", "apac"}
	g.Expect(env.Client.Update(ctx, s)).To(Succeed())
	_, apac := shardOwner(g, ns, "tenants", "apac", a)
	status, e = put(apac, "t/apac/0")
	g.Expect(status).To(Equal(http.StatusOK), e.Message)
	g.Expect(env.Client.Get(ctx, keyOf(ns, "tenants"), s)).To(Succeed())
	s.Spec.Keys = []string{"eu"}
	g.Expect(env.Client.Update(ctx, s)).To(Succeed())
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, keyOf(ns, record.ShardLeaseName("tenants", "apac")), &coordinationv1.Lease{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).Should(BeTrue(), "a removed shard's Lease is deleted")
	before := reads.n.Load()
	status, e = put(apac, "t/apac/1")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Message).To(ContainSubstring("does not exist"))
	g.Expect(reads.n.Load()).To(Equal(before), "judged by the Lease, not by another read of the set")

	for _, k := range []string{"t/eu/old", "t/us/1", "t/apac/1"} {
		content, _ := storedObject(ctx, bucket, k)
		g.Expect(content).To(Equal("<absent>"), k)
	}
}
