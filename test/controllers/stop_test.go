package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestManagerRefusesOperatorRenewal: a FencedLease of the default renewal
// (Operator). Two managers start as pods a and b before anything is
// granted; a is then granted. Neither runs its controllers: both Start
// return ErrOperatorRenewal with a message that names the FencedLease,
// says why and what to set, as soon as the Lease records the grant (b, not
// granted, too), and their clients refuse every write with it. Under
// Operator renewal a pod cannot know when its grant ends, so a manager that
// ran would not stop on its own clock.
func TestManagerRefusesOperatorRenewal(t *testing.T) {
	f := newFixture(t)
	f.allow("configmaps", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch", "delete")
	f.startOperator()
	f.g.Expect(admin.Create(f.ctx, testenv.FencedLease(f.ns, "widgets", podLabels, nil))).To(Succeed())
	a, b := f.pod("a"), f.pod("b")
	ma := f.startManager(a, nil, fencedcontroller.Options{})
	mb := f.startManager(b, nil, fencedcontroller.Options{})
	time.Sleep(time.Second)
	f.ready(a, time.Hour)
	for _, m := range []*inProcess{ma, mb} {
		var err error
		f.g.Eventually(m.done).WithTimeout(timeout).Should(Receive(&err))
		f.g.Expect(errors.Is(err, fencedcontroller.ErrOperatorRenewal)).To(BeTrue(), "%v", err)
		f.g.Expect(err.Error()).To(Equal("FencedLease " + f.ns + "/widgets: its grants are renewed by the operator (spec.renewal: Operator), " +
			"so this pod cannot know on its own clock when its grant ends (the operator vouches for quiet grants without writing the Lease; " +
			"a pod cut off from the API server learns nothing): set spec.renewal: Holder, under which the pod renews its own grant and " +
			"stops its controllers before its own deadline: a fenced controller needs spec.renewal: Holder"))
		started, _, _ := m.probe.times()
		f.g.Expect(started).To(BeZero(), "a controller ran under Operator renewal")
		werr := m.Client().Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "unprotected"}})
		f.g.Expect(errors.Is(werr, fence.ErrNotHolder)).To(BeTrue(), "%v", werr)
		f.g.Expect(werr.Error()).To(ContainSubstring("set spec.renewal: Holder"))
	}
	f.g.Eventually(func(g Gomega) {
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(admin.Get(f.ctx, clientKey(f.ns, "widgets"), fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		g.Expect(fl.Status.Holder.PodName).To(Equal("a"))
	}).WithTimeout(timeout).Should(Succeed(), "a was granted")
}

// writer writes an unprotected ConfigMap through a manager's client every
// 50 ms until stopped, and records when each write began and whether the
// client let it out (refused: fence.ErrNotHolder) or sent it.
type writer struct {
	mu     sync.Mutex
	writes []attempt
	stop   context.CancelFunc
	done   chan struct{}
}

type attempt struct {
	began time.Time
	sent  bool
}

func (f *fixture) startWriter(c client.Client, name string) *writer {
	ctx, cancel := context.WithCancel(f.ctx)
	w := &writer{stop: cancel, done: make(chan struct{})}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	f.g.Expect(admin.Create(f.ctx, cm)).To(Succeed())
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			began := time.Now()
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			err := c.Patch(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, i))))
			cancel()
			w.mu.Lock()
			w.writes = append(w.writes, attempt{began: began, sent: !errors.Is(err, fence.ErrNotHolder)})
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	f.t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// lastSent is when the last write that the client let out began, and how
// many writes that began after t it let out.
func (w *writer) lastSent(t time.Time) (last time.Time, after int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.writes {
		if !a.sent {
			continue
		}
		last = a.began
		if a.began.After(t) {
			after++
		}
	}
	return last, after
}

// grantedTo returns a function that tells when the Lease was first seen
// naming pod, polled every 10 ms from now on.
func (f *fixture) grantedTo(pod string) func() time.Time {
	var mu sync.Mutex
	var at time.Time
	ctx, cancel := context.WithCancel(f.ctx)
	f.t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			l := &coordinationv1.Lease{}
			if admin.Get(ctx, clientKey(f.ns, "widgets"), l) == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == pod {
				mu.Lock()
				at = time.Now()
				mu.Unlock()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

// proxied is the start both tests below share: renewal Holder, takeover
// Safe; pod a's manager (ma) reaches the API server through proxy and
// holds, writing ConfigMaps (w); pod b's manager (mb) waits; grantedB tells
// when b is granted.
type proxied struct {
	f        *fixture
	proxy    *testenv.APIProxy
	a        *corev1.Pod
	ma, mb   *inProcess
	w        *writer
	grantedB func() time.Time
}

func proxiedHolder(t *testing.T) proxied {
	t.Helper()
	f := newFixture(t)
	f.allow("configmaps", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch")
	f.holderLease()
	proxy, err := testenv.StartAPIProxy(env.Config)
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(proxy.Close)
	p := proxied{f: f, proxy: proxy, a: f.pod("a")}
	p.ma = f.startManager(p.a, proxy, fencedcontroller.Options{})
	f.ready(p.a, time.Hour)
	f.g.Eventually(p.ma.mgr.Elected()).WithTimeout(timeout).Should(BeClosed())
	p.mb = f.holding("b", time.Minute, fencedcontroller.Options{}, false)
	p.w = f.startWriter(p.ma.Client(), "a-writes")
	p.grantedB = f.grantedTo("b")
	return p
}

// TestManagerWithItsLeaseWatchBlackHoledStops: renewal Holder, takeover
// Safe. Replica a reaches the API server through a proxy, and holds; its
// watches of Leases are then black-holed (open, silent, no error), and a
// is made ineligible: the operator revokes its grant, and grants b once a's
// grant has expired. a learns of the revocation without its watch (its
// next renewal, a compare-and-swap on the version it holds, conflicts, and
// it reads the Lease), stops its controllers, and its manager's Start
// returns ErrLeaderElectionLost; its client let out no write, protected or
// not, after the controllers stopped, and b is granted after that.
func TestManagerWithItsLeaseWatchBlackHoledStops(t *testing.T) {
	p := proxiedHolder(t)
	f, proxy, a, ma, mb, w, grantedB := p.f, p.proxy, p.a, p.ma, p.mb, p.w, p.grantedB
	time.Sleep(time.Second)

	proxy.Stall(testenv.IsWatch("leases"))
	revoked := time.Now()
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, admin, a)).To(Succeed())
	var stopErr error
	f.g.Eventually(ma.done).WithTimeout(timeout).Should(Receive(&stopErr))
	f.g.Expect(errors.Is(stopErr, fencedcontroller.ErrLeaderElectionLost)).To(BeTrue(), "%v", stopErr)
	_, stopped, _ := ma.probe.times()
	f.g.Expect(stopped).NotTo(BeZero())
	f.g.Eventually(mb.mgr.Elected()).WithTimeout(timeout).Should(BeClosed())
	f.g.Eventually(grantedB).WithTimeout(timeout).ShouldNot(BeZero())
	time.Sleep(500 * time.Millisecond) // a's writer tries on
	last, after := w.lastSent(stopped)
	t.Logf("a's controllers stopped %s after it was made ineligible, its last write let out %s before that; b granted %s after the stop",
		stopped.Sub(revoked).Round(time.Millisecond), stopped.Sub(last).Round(time.Millisecond), grantedB().Sub(stopped).Round(time.Millisecond))
	f.g.Expect(proxy.Held()).To(BeNumerically(">", 0), "a's Lease watch was black-holed")
	f.g.Expect(after).To(BeZero(), "writes a's client let out after its controllers stopped")
	f.g.Expect(stopped).To(BeTemporally("<", grantedB()), "b granted while a's controllers ran")
}

// TestPartitionedManagerStopsBeforeTheNextGrant measures how long before
// the next grant a replica that is silently partitioned (every request of
// its manager and Session held by the proxy, unanswered) has stopped its
// controllers and its writes: renewal Holder, takeover Safe, 4 s lease
// renewed every second, the default margin (1 s) and StopLead (2 s, capped
// half way between the renewal falling due and the deadline). It prints
// the times; it asserts the order only (the controllers stop, and the
// client lets out no write that began after the grant, before b is
// granted), not a duration.
func TestPartitionedManagerStopsBeforeTheNextGrant(t *testing.T) {
	p := proxiedHolder(t)
	f, proxy, ma, mb, w, grantedB := p.f, p.proxy, p.ma, p.mb, p.w, p.grantedB
	time.Sleep(1500 * time.Millisecond)

	proxy.StallAll()
	cut := time.Now()
	var stopErr error
	f.g.Eventually(ma.done).WithTimeout(timeout).Should(Receive(&stopErr))
	f.g.Expect(errors.Is(stopErr, fencedcontroller.ErrLeaderElectionLost)).To(BeTrue(), "%v", stopErr)
	f.g.Eventually(mb.mgr.Elected()).WithTimeout(timeout).Should(BeClosed())
	f.g.Eventually(grantedB).WithTimeout(timeout).ShouldNot(BeZero())
	granted := grantedB()
	_, stopped, _ := ma.probe.times()
	last, after := w.lastSent(granted)
	t.Logf("partitioned %s before b's grant; a's controllers stopped %s before it, the last write a's client let out began %s before it",
		granted.Sub(cut).Round(time.Millisecond), granted.Sub(stopped).Round(time.Millisecond), granted.Sub(last).Round(time.Millisecond))
	testenv.WriteResult(t, "CONTROLLERS_PARTITION_RESULT", map[string]any{
		"partitionedBeforeGrantMs": granted.Sub(cut).Milliseconds(),
		"stoppedBeforeGrantMs":     granted.Sub(stopped).Milliseconds(),
		"lastWriteBeforeGrantMs":   granted.Sub(last).Milliseconds(),
	})
	f.g.Expect(after).To(BeZero(), "writes a's client let out after b's grant")
	f.g.Expect(stopped).To(BeTemporally("<", granted), "a's controllers ran when b was granted")
}
