package fencing_test

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	fencingwebhook "github.com/fencedlease/fencedlease/internal/webhook/fencing"
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

// countingReader counts the FencedLease reads from the API server.
type countingReader struct {
	client.Reader
	reads atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*fencingv1alpha1.FencedLease); ok {
		c.reads.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// startLaggingOperator runs the operator with the fencing webhook reading
// through a cache the test controls and an API reader that counts.
func (f *fixture) startLaggingOperator() (*laggingCache, *countingReader) {
	w := &env.WebhookInstallOptions
	lag := &laggingCache{frozen: map[types.NamespacedName]*fencingv1alpha1.FencedLease{}}
	api := &countingReader{}
	f.startOperator(testenv.ManagerOptions{
		Configure: func(o *ctrl.Options) {
			o.WebhookServer = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
		},
		Register: func(mgr ctrl.Manager) error {
			lag.Reader, api.Reader = mgr.GetClient(), mgr.GetAPIReader()
			ep, err := setup.WebhookEndpoint(f.ctx, mgr, webhookOptions)
			if err != nil {
				return err
			}
			if err := fencingwebhook.Add(mgr, fencingwebhook.Options{
				OperatorUsers: webhookOptions.OperatorUsers, Cache: lag, APIReader: api, Endpoint: ep,
			}); err != nil {
				return err
			}
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
	return lag, api
}

func (f *fixture) getFL(name string) *fencingv1alpha1.FencedLease {
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, fl)).To(Succeed())
	return fl
}

// TestCacheLag forces the webhook's cache to lag behind the grants and checks
// both directions: the lag never rejects the legitimate new holder (one read
// from the API server settles it), and the read never lets a forged fence or
// a stale pod through.
func TestCacheLag(t *testing.T) {
	f := newFixture(t)
	lag, api := f.startLaggingOperator()
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	n := f.waitHolder("db", "a", 0)
	asA, asB := f.asPod(a), f.asPod(b)
	key := types.NamespacedName{Namespace: f.ns, Name: "db"}
	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)

	// Up to date: the holder's write needs no read from the API server.
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1 by a"))).To(Succeed())
	f.g.Expect(api.reads.Load()).To(BeZero())

	// The cache keeps A's grant while B is granted M.
	lag.freeze(key, f.getFL("db"))
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)

	// B's fence is higher than the cached one: read, then admit.
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v2 by b")).To(Succeed())
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(1))

	// A copies B's fence: the read names B as holder.
	f.expectDenied(f.writeCM(asA, "state", fenceOf(m), "v3 by a"),
		fmt.Sprintf(`%s: write with fence %d rejected: pod a is not the holder of FencedLease "db" (holder: pod b, fence %d)`, obj, m, m))
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(2))

	// A forged fence above M: the read shows it was never granted.
	f.expectDenied(f.writeCM(asB, "state", fenceOf(m+1000), "forged"),
		fmt.Sprintf(`%s: write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, obj, m+1000, m))
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(3))

	// A with its own fence, which the lagging cache still calls current: the
	// object already carries M, so the per-object order rejects it without a read.
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n), "v3 by a"),
		fmt.Sprintf(`%s: write with fence %d rejected: the object was last written with fence %d`, obj, n, m))
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(3))
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))

	// The cache has the new fence but not yet the new holder's pod: a
	// mismatching pod is read again before it is denied.
	mixed := f.getFL("db")
	mixed.Status.Holder.PodName, mixed.Status.Holder.PodUID = "a", a.UID
	lag.freeze(key, mixed)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v3 by b")).To(Succeed())
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(4))

	// The cache has not seen the FencedLease at all.
	lag.freeze(key, nil)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v4 by b")).To(Succeed())
	f.g.Expect(asB.Create(f.ctx, f.secret("creds", "db", fenceOf(m), "s1 by b"))).To(Succeed())
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(6))

	// Caught up: no more reads.
	lag.thaw(key)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v5 by b")).To(Succeed())
	f.g.Expect(api.reads.Load()).To(BeEquivalentTo(6))
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
	cacheReads, apiReads := lag.reads.Load(), api.reads.Load()
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
	f.g.Expect(api.reads.Load()).To(Equal(apiReads), "a caller that is not a pod made the webhook read the API server")
	f.g.Expect(decisions(map[string]string{"reason": "stale_fence"})).To(Equal(stale))

	// A pod with the same higher fence is read from the API server.
	f.expectDenied(f.writeCM(f.asPod(b), "state", fenceOf(n+1), "forged"),
		fmt.Sprintf(`%s: write with fence %d rejected: unknown fence: FencedLease "db" is at fence %d`, obj, n+1, n))
	f.g.Expect(lag.reads.Load()).To(Equal(cacheReads + 1))
	f.g.Expect(api.reads.Load()).To(Equal(apiReads + 1))
}
