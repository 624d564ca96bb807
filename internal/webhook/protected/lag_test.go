package protected_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/internal/webhook/protected"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// laggingCache serves FencedLeases from snapshots the test takes, as an
// informer cache that has not seen the latest updates would.
type laggingCache struct {
	client.Reader
	mu     sync.Mutex
	frozen map[types.NamespacedName]*fencingv1alpha1.FencedLease
	// reads counts the FencedLease reads from the cache.
	reads atomic.Int32
}

func (l *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if fl, ok := obj.(*fencingv1alpha1.FencedLease); ok {
		l.reads.Add(1)
		l.mu.Lock()
		snap, frozen := l.frozen[key]
		l.mu.Unlock()
		if frozen {
			if snap == nil {
				return apierrors.NewNotFound(fencingv1alpha1.GroupVersion.WithResource("fencedleases").GroupResource(), key.Name)
			}
			snap.DeepCopyInto(fl)
			return nil
		}
	}
	return l.Reader.Get(ctx, key, obj, opts...)
}

// freeze makes the cache return fl (nil: not found) from now on.
func (l *laggingCache) freeze(key types.NamespacedName, fl *fencingv1alpha1.FencedLease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frozen[key] = fl
}

func (l *laggingCache) thaw(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.frozen, key)
}

// countingReader counts the reads from the API server, by kind.
type countingReader struct {
	client.Reader
	fencedLeases, leases atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch obj.(type) {
	case *fencingv1alpha1.FencedLease:
		c.fencedLeases.Add(1)
	case *coordinationv1.Lease:
		c.leases.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// replica is one webhook replica of a test: its handler reads through a
// cache of its own, which the test makes lag, and an API reader that counts.
type replica struct {
	lag *laggingCache
	api *countingReader
}

// startLaggingOperator runs the operator with the fencing webhook reading
// through a cache the test controls and an API reader that counts.
func (f *fixture) startLaggingOperator() (*laggingCache, *countingReader) {
	rs := f.startLaggingReplicas(1)
	return rs[0].lag, rs[0].api
}

// startLaggingReplicas runs the operator with n fencing webhook replicas
// behind one endpoint, each with a cache of its own: the API server's
// requests go to them in turn, as a Service in front of n replicas may send
// them.
func (f *fixture) startLaggingReplicas(n int) []replica {
	w := &env.WebhookInstallOptions
	rs := make([]replica, n)
	f.startOperator(testenv.ManagerOptions{
		Configure: func(o *ctrl.Options) {
			o.WebhookServer = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
		},
		Register: func(mgr ctrl.Manager) error {
			ep, err := setup.WebhookEndpoint(f.ctx, mgr, webhookOptions)
			if err != nil {
				return err
			}
			turns := &inTurn{}
			for i := range rs {
				rs[i] = replica{lag: &laggingCache{Reader: mgr.GetClient(), frozen: map[types.NamespacedName]*fencingv1alpha1.FencedLease{}},
					api: &countingReader{Reader: mgr.GetAPIReader()}}
				h, err := protected.New(mgr, protected.Options{OperatorUsers: webhookOptions.OperatorUsers, Cache: rs[i].lag, APIReader: rs[i].api})
				if err != nil {
					return err
				}
				turns.handlers = append(turns.handlers, h)
			}
			ep.Register(mgr.GetWebhookServer(), protected.Path, &webhook.Admission{Handler: turns})
			return ep.Publish(f.ctx, mgr.GetAPIReader(), mgr.GetClient())
		},
	})
	addr := net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort))
	f.g.Eventually(func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only checks that the local test server is up
		if err == nil {
			return conn.Close()
		}
		return err
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return rs
}

// inTurn hands each admission request to the next of its handlers in turn.
type inTurn struct {
	handlers []admission.Handler
	next     atomic.Int64
}

func (t *inTurn) Handle(ctx context.Context, req admission.Request) admission.Response {
	i := t.next.Add(1) - 1
	return t.handlers[int(i)%len(t.handlers)].Handle(ctx, req)
}

func (f *fixture) getFL(name string) *fencingv1alpha1.FencedLease {
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, fl)).To(Succeed())
	return fl
}

// TestCacheLag forces the webhook's cache to lag behind the grants: the
// cache never decides. Every decision for a pod reads the grant from the
// Lease on the API server, so the lag neither rejects the legitimate new
// holder nor lets the holder it replaced write, create or delete, once a
// grant is committed; the cache only says which FencedLease protects the
// object (read from the API server when the cache does not have it).
func TestCacheLag(t *testing.T) {
	f := newFixture(t)
	lag, api := f.startLaggingOperator()
	a, _, n, asA, asB := f.holderAndStandby()
	key := types.NamespacedName{Namespace: f.ns, Name: "db"}
	obj := func(name string) string { return fmt.Sprintf("ConfigMap %s/%s", f.ns, name) }
	// reads checks the reads from the API server so far: the FencedLeases
	// exactly (the cache never decides, and is read around only when it
	// lacks the FencedLease), the Leases at least one per decision. The API
	// server may call the webhook again for one request, after a call that
	// failed on a busy machine; that is one more Lease read, never a
	// decision without one.
	reads := func(fencedLeases, leases int32) {
		t.Helper()
		f.g.Expect(api.fencedLeases.Load()).To(Equal(fencedLeases), "FencedLease reads from the API server")
		f.g.Expect(api.leases.Load()).To(BeNumerically(">=", leases), "Lease reads from the API server")
	}

	// Every write by a pod reads the Lease, one read.
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1 by a"))).To(Succeed())
	reads(0, 1)

	// The cache keeps A's grant while B is granted M.
	lag.freeze(key, f.getFL("db"))
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v2 by b")).To(Succeed())
	reads(0, 2)

	// A, after the webhook admitted B's write, with its own fence, which
	// the lagging cache still calls current: an update, a create of another
	// object and a delete of B's object are all rejected.
	stale := func(name string, fence int64) string {
		return fmt.Sprintf(`%s: write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, obj(name), fence, m)
	}
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n), "v3 by a"), stale("state", n))
	f.expectDenied(asA.Create(f.ctx, f.configMap("other", "db", fenceOf(n), "by a")), stale("other", n))
	f.expectDenied(asA.Delete(f.ctx, f.configMap("state", "db", "", "")),
		fmt.Sprintf(`%s: delete rejected: pod a is not the holder of FencedLease "db" (holder: pod b, fence %d)`, obj("state"), m))
	// A copies B's fence.
	f.expectDenied(f.writeCM(asA, "state", fenceOf(m), "v3 by a"),
		fmt.Sprintf(`%s: write with fence %d rejected: pod a is not the holder of FencedLease "db" (holder: pod b, fence %d)`, obj("state"), m, m))
	// A forged fence above M was never granted.
	f.expectDenied(f.writeCM(asB, "state", fenceOf(m+1000), "forged"),
		fmt.Sprintf(`%s: write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, obj("state"), m+1000, m))
	reads(0, 7)
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))
	f.g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "other"}, &corev1.ConfigMap{}))).To(BeTrue())

	// The cache has not seen the FencedLease at all: it is read from the
	// API server, then its Lease.
	lag.freeze(key, nil)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v4 by b")).To(Succeed())
	f.g.Expect(asB.Create(f.ctx, f.secret("creds", "db", fenceOf(m), "s1 by b"))).To(Succeed())
	reads(2, 9)

	// Caught up.
	lag.thaw(key)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v5 by b")).To(Succeed())
	f.g.Expect(asB.Delete(f.ctx, f.configMap("state", "db", "", ""))).To(Succeed())
	reads(2, 11)
}

// TestTwoWebhookReplicasWithCachesThatLagDifferently: two webhook replicas,
// one whose cache still shows the old holder's grant and one whose cache
// has not seen the FencedLease, decide the requests in turn. Once the newer
// grant is committed, neither admits the old holder's update, create or
// delete, whichever of them a request reaches.
func TestTwoWebhookReplicasWithCachesThatLagDifferently(t *testing.T) {
	f := newFixture(t)
	rs := f.startLaggingReplicas(2)
	a, _, n, asA, asB := f.holderAndStandby()
	key := types.NamespacedName{Namespace: f.ns, Name: "db"}
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1 by a"))).To(Succeed())

	rs[0].lag.freeze(key, f.getFL("db"))
	rs[1].lag.freeze(key, nil)
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v2 by b")).To(Succeed())

	// Each request twice in a row: one reaches each replica.
	for i := range 2 {
		f.g.Expect(f.writeCM(asA, "state", fenceOf(n), "by a")).To(MatchError(ContainSubstring("stale holder")), "update, try %d", i)
		f.g.Expect(asA.Create(f.ctx, f.configMap(fmt.Sprintf("other-%d", i), "db", fenceOf(n), "by a"))).To(MatchError(ContainSubstring("stale holder")), "create, try %d", i)
		f.g.Expect(asA.Delete(f.ctx, f.configMap("state", "db", "", ""))).To(MatchError(ContainSubstring("pod a is not the holder")), "delete, try %d", i)
	}
	for _, r := range rs {
		f.g.Expect(r.lag.reads.Load()).To(BeNumerically(">=", 3), "every replica decided some of the requests")
	}
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))
	var list corev1.ConfigMapList
	f.g.Expect(f.c.List(f.ctx, &list, client.InNamespace(f.ns))).To(Succeed())
	for _, cm := range list.Items {
		f.g.Expect(cm.Name).NotTo(HavePrefix("other-"), "a create of the old holder was admitted")
	}
}

// TestCallersThatAreNotPodsCostNoRead: a write or delete by a caller that is
// not a pod is decided before the FencedLease is read, from the cache or
// from the API server, whatever fence it presents: in particular a fence
// higher than the cached one, which from a pod makes the webhook read the
// API server. Nor does a low fence from such a caller count as a stale
// holder (no stale_fence decision, no Event).
func TestCallersThatAreNotPodsCostNoRead(t *testing.T) {
	f := newFixture(t)
	lag, api := f.startLaggingOperator()
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	n := f.waitHolder("db", "a", 0)
	f.g.Expect(f.asPod(a).Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1"))).To(Succeed())
	cacheReads, apiReads := lag.reads.Load(), api.fencedLeases.Load()+api.leases.Load()
	stale := decisions(map[string]string{"reason": "stale_fence"})
	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)
	notPod := func(fence int64) string {
		return fmt.Sprintf(`%s: write with fence %d rejected: user "mallory" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`, obj, fence)
	}
	mallory := f.user("mallory")
	for i := range 5 {
		f.expectDenied(f.writeCM(mallory, "state", fenceOf(n+1+int64(i)), "forged"), notPod(n+1+int64(i)))
		f.expectDenied(f.writeCM(mallory, "state", fenceOf(n-1), "stale"), notPod(n-1))
		f.expectDenied(mallory.Create(f.ctx, f.secret(fmt.Sprintf("s%d", i), "db", fenceOf(n+100), "x")),
			fmt.Sprintf(`Secret %s/s%d: write with fence %d rejected: user "mallory" is not a pod: only the holder pod of FencedLease "db" may write this object (a fence is no proof of identity)`, f.ns, i, n+100))
		f.expectDenied(mallory.Delete(f.ctx, f.configMap("state", "db", "", "")),
			fmt.Sprintf(`%s: delete rejected: a delete carries no fence: only the holder pod of FencedLease "db" may delete this object`, obj))
	}
	f.g.Expect(lag.reads.Load()).To(Equal(cacheReads), "a caller that is not a pod made the webhook read the cache")
	f.g.Expect(api.fencedLeases.Load()+api.leases.Load()).To(Equal(apiReads), "a caller that is not a pod made the webhook read the API server")
	f.g.Expect(decisions(map[string]string{"reason": "stale_fence"})).To(Equal(stale))

	// A pod with the same higher fence costs a read of the cache and one of
	// the Lease.
	f.expectDenied(f.writeCM(f.asPod(b), "state", fenceOf(n+1), "forged"),
		fmt.Sprintf(`%s: write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, obj, n+1, n))
	f.g.Expect(lag.reads.Load()).To(Equal(cacheReads + 1))
	f.g.Expect(api.leases.Load()).To(Equal(apiReads + 1))
}
