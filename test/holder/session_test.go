package holder_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/test/testenv"
)

func (f *fixture) lease() *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, l)).To(Succeed())
	return l
}

// TestHolderRenewsItsOwnGrant: the operator grants a; a's session holds the
// grant only once its first own renewal succeeded, then renews it itself
// (the operator does not), with a deadline a lease duration (minus the
// margin) after each renewal; the fence is the one the status records.
func TestHolderRenewsItsOwnGrant(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(nil)
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	sa := f.session(a, nil)

	hctx, g, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(g.HolderRenews).To(BeTrue())
	f.g.Eventually(func() int64 { return f.status().Fence }).WithTimeout(timeout).Should(Equal(g.Fence))
	f.g.Expect(time.Until(g.Deadline)).To(BeNumerically(">", 0))
	f.g.Expect(time.Until(g.Deadline)).To(BeNumerically("<=", 4*time.Second))

	// Renewals come from the pod: the Lease's renewTime moves on, the fence
	// stays, and the holder context stays open across several lease
	// durations.
	first := f.lease().Spec.RenewTime.Time
	f.g.Consistently(func() error { return hctx.Err() }).WithTimeout(10 * time.Second).Should(Succeed())
	l := f.lease()
	f.g.Expect(l.Spec.RenewTime.Time).To(BeTemporally(">", first.Add(5*time.Second)))
	f.g.Expect(l.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(strconv.FormatInt(g.Fence, 10)))
	cur, ok := sa.Current()
	f.g.Expect(ok).To(BeTrue())
	f.g.Expect(cur.Fence).To(Equal(g.Fence))
	f.g.Expect(cur.Deadline).To(BeTemporally(">", g.Deadline))
}

// TestHolderThatStopsRenewingStopsBeforeTheNextGrant: a's session holds the
// grant and is then cut off from the API server (every request fails, as in
// a partition). It stops holding on its own clock at its deadline; the
// operator sees no renewal for a lease duration and grants b (takeover Safe)
// only after a's deadline. b's session then holds a higher fence.
func TestHolderThatStopsRenewingStopsBeforeTheNextGrant(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(nil)
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	var cut atomicBool
	sa := f.session(a, func(c *fence.APIConfig) {
		token := c.Token
		c.Token = func() (string, error) {
			if cut.Load() {
				return "", errors.New("partitioned")
			}
			return token()
		}
	})
	hctx, ga, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	sb := f.session(b, nil)

	cut.Store(true)
	<-hctx.Done()
	stopped := time.Now()
	f.g.Expect(context.Cause(hctx)).To(MatchError(ContainSubstring("no successful renewal of the grant with fence")))
	f.g.Expect(errors.Is(context.Cause(hctx), fence.ErrLost)).To(BeTrue())
	_, stillHolds := sa.Current()
	f.g.Expect(stillHolds).To(BeFalse())

	gb, err := sb.WaitHolder(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(gb.Fence).To(BeNumerically(">", ga.Fence))
	granted := f.lease().Spec.AcquireTime.Time
	t.Logf("a stopped at its deadline %s before b was granted", granted.Sub(stopped).Round(time.Millisecond))
	f.g.Expect(granted).To(BeTemporally(">=", ga.Deadline), "b granted only after a's own deadline")
}

// TestRevocationEndsTheHolderAtOnce: a's containers stop being ready; the
// operator revokes the grant and a's session learns it from the Lease at
// once (it does not wait for its deadline nor for the kubelet's files).
func TestRevocationEndsTheHolderAtOnce(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 30 })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	sa := f.session(a, nil)
	hctx, g, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(hctx.Done()).WithTimeout(5 * time.Second).Should(BeClosed())
	f.g.Expect(context.Cause(hctx)).To(MatchError(ContainSubstring("the Lease moved from the grant with fence " + strconv.FormatInt(g.Fence, 10))))
	f.g.Expect(time.Until(g.Deadline)).To(BeNumerically(">", 20*time.Second), "ended long before its deadline")
}

// TestReleaseHandsOverAtOnce: with takeover Safe, a releases its grant; b is
// granted at once (not a lease duration later) with a higher fence, and a
// late renewal of a's old grant is refused.
func TestReleaseHandsOverAtOnce(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 60 })
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	sa, sb := f.session(a, nil), f.session(b, nil)
	hctx, ga, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	old := f.lease()

	f.g.Expect(sa.Release(f.ctx)).To(Succeed())
	f.g.Expect(hctx.Done()).To(BeClosed())
	waitCtx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	gb, err := sb.WaitHolder(waitCtx)
	f.g.Expect(err).NotTo(HaveOccurred(), "b is granted long before a's 60s lease would expire")
	f.g.Expect(gb.Fence).To(BeNumerically(">", ga.Fence))

	// A's old grant, renewed late with its pod's token: refused.
	pc, err := testenv.PodClient(f.ctx, env.Config, a)
	f.g.Expect(err).NotTo(HaveOccurred())
	late := old.DeepCopy()
	f.g.Expect(pc.Update(f.ctx, late)).To(HaveOccurred())
	_, ok := sa.Current()
	f.g.Expect(ok).To(BeFalse())
}

// TestReleaseOfARevokedGrantHandsOverAtOnce: a is being deleted, so the
// operator revokes its grant at once (takeover Safe, a 60 s lease). Once
// a's work has stopped it releases the revoked grant, and b is granted at
// once rather than when the revoked grant expires. A late release of that
// grant, after b's, changes nothing.
func TestReleaseOfARevokedGrantHandsOverAtOnce(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 60 })
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	a.Finalizers = []string{"test.fencedlease.io/keep"}
	f.g.Expect(f.c.Update(f.ctx, a)).To(Succeed())
	t.Cleanup(func() {
		a.Finalizers = nil
		_ = f.c.Update(context.Background(), a)
	})
	sa, sb := f.session(a, nil), f.session(b, nil)
	hctx, ga, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())

	f.g.Expect(f.c.Delete(f.ctx, a)).To(Succeed())
	f.g.Eventually(hctx.Done()).WithTimeout(5 * time.Second).Should(BeClosed())
	f.g.Expect(f.lease().Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("revoked"))

	f.g.Expect(sa.ReleaseGrant(f.ctx, ga.Fence)).To(Succeed())
	waitCtx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	gb, err := sb.WaitHolder(waitCtx)
	f.g.Expect(err).NotTo(HaveOccurred(), "b is granted long before a's revoked 60s grant would expire")
	f.g.Expect(gb.Fence).To(BeNumerically(">", ga.Fence))

	f.g.Expect(sa.ReleaseGrant(f.ctx, ga.Fence)).To(Succeed())
	f.g.Consistently(func() bool { return sb.Valid(gb) }).WithTimeout(time.Second).Should(BeTrue())
	f.g.Expect(f.lease().Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]).To(Equal(string(b.UID)))
}

// TestReleaseOnCancel: with ReleaseOnCancel, cancelling the context given to
// HolderContext releases the grant (takeover Safe, a 60 s lease): b is
// granted at once. Without it, the same cancellation leaves the grant to
// expire: b is not granted for as long as a keeps renewing.
func TestReleaseOnCancel(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 60 })
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	sa := f.sessionWith(a, nil, func(c *fence.SessionConfig) { c.ReleaseOnCancel = true })
	sb := f.session(b, nil)

	ctx, cancel := context.WithCancel(f.ctx)
	_, ga, err := sa.HolderContext(ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	cancel()
	waitCtx, stop := context.WithTimeout(f.ctx, 10*time.Second)
	defer stop()
	gb, err := sb.WaitHolder(waitCtx)
	f.g.Expect(err).NotTo(HaveOccurred(), "b is granted long before a's 60s lease would expire")
	f.g.Expect(gb.Fence).To(BeNumerically(">", ga.Fence))

	// Without ReleaseOnCancel, b's cancelled context releases nothing.
	ctx, cancel = context.WithCancel(f.ctx)
	_, _, err = sb.HolderContext(ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	cancel()
	f.g.Consistently(func() bool { return sb.Valid(gb) }).WithTimeout(3 * time.Second).Should(BeTrue())
	f.g.Expect(f.lease().Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("held"))
}

// TestSessionLearnsOfARevocationWithItsWatchBlackHoled: renewal Operator,
// a's session reaches the API server through a proxy that, once a holds,
// stalls every watch of Leases: the watch stays open and delivers nothing,
// with no error, while reads still pass. a is then made ineligible and the
// operator revokes its grant. a's session learns of it though its watch
// says nothing (the API server ends each watch after the lease duration,
// 5 s at least, and the session gives up on one that has not ended 2 s
// later and reads the Lease again): its holder context ends. Before the
// watch had a bound, a held on for as long as the watch stayed silent.
func TestSessionLearnsOfARevocationWithItsWatchBlackHoled(t *testing.T) {
	f := newFixture(t)
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Renewal = fencingv1alpha1.RenewalOperator })
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	proxy, err := testenv.StartAPIProxy(env.Config)
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(proxy.Close)
	sa := f.session(a, func(c *fence.APIConfig) { c.Host, c.CAData = proxy.Host(), proxy.CAData() })
	hctx, g, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(g.HolderRenews).To(BeFalse())
	f.g.Expect(sa.Renewal()).To(Equal(string(fencingv1alpha1.RenewalOperator)))

	proxy.Stall(testenv.IsWatch("leases"))
	stalledAt := time.Now()
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	f.g.Eventually(func() string { return f.lease().Annotations[fencingv1alpha1.LeaseAnnotationState] }).
		WithTimeout(timeout).ShouldNot(Equal("held"), "the operator revokes a's grant")
	revokedAt := time.Now()
	f.g.Eventually(hctx.Done()).WithTimeout(timeout).Should(BeClosed(), "a's session learns of the revocation")
	t.Logf("a's session learned of the revocation %s after it, its watch black-holed %s before it",
		time.Since(revokedAt).Round(time.Millisecond), revokedAt.Sub(stalledAt).Round(time.Millisecond))
	f.g.Expect(context.Cause(hctx)).To(MatchError(fence.ErrLost))
	_, held := sa.Current()
	f.g.Expect(held).To(BeFalse())
	f.g.Expect(proxy.Held()).To(BeNumerically(">", 0), "the proxy stalled a's watch")
}
