package holder_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// readyPodOn is readyPod on a node of its own (created Ready).
func (f *fixture) readyPodOn(name, node string, readyFor time.Duration) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: labels, ServiceAccount: "default", Node: node})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

// partitionRun is what one partitioned-holder run measured.
type partitionRun struct {
	// Cut is when a lost its API access (and, with a lost node, when its
	// node was marked lost).
	Cut time.Time
	// Deadline is a's deadline by the design: its last accepted renewal's
	// send time + leaseDuration − margin.
	Deadline time.Time
	// Stopped is the stop line of a's child; Granted is b's acquireTime;
	// StartedB is the start line of b's child.
	Stopped, Granted, StartedB time.Time
}

// partitioned is one run of the partitioned holder: a runs fence run
// through a TCP proxy in front of the API server, b reaches the API server
// directly. Right after one of a's renewals, at a random offset within the
// renew interval, the proxy stops forwarding anything (a partition:
// connections hang, nothing is refused); with lostNode, a's node is marked
// lost at the same moment, as the node lifecycle controller would (here at
// once, not after its grace period). a cannot learn anything from the API
// server: it must stop its child on its own clock, at its deadline, and b
// must be granted only after that, after a lease duration without renewal.
// Once b runs, the partition heals: a must not start again nor renew its old
// grant.
func partitioned(t *testing.T, bin binaries, lostNode bool) partitionRun {
	f := newFixture(t)
	rec := f.recordLease("db")
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(pauseLease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(pauseInterval / time.Second))
	})
	var a *corev1.Pod
	nodeA := f.ns + "-a"
	if lostNode {
		a = f.readyPodOn("a", nodeA, time.Hour)
	} else {
		a = f.readyPod("a", time.Hour)
	}
	b := f.readyPod("b", time.Minute)
	_, err := rec.wait(f.ctx, timeout, "created", func(leaseVersion) bool { return true })
	f.g.Expect(err).NotTo(HaveOccurred())
	proxy := startProxy(t, apiAddr())
	pa := f.startHolder(bin, a, holderOptions{API: proxy.Addr(), Margin: pauseMargin})
	pb := f.startHolder(bin, b, holderOptions{Margin: pauseMargin})

	startA, err := pa.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	grantA, err := rec.grantTo(f.ctx, a.UID, 0, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	renewed, err := rec.wait(f.ctx, timeout, "renewed by a", func(v leaseVersion) bool {
		return v.Transitions == grantA.Transitions && v.RenewTime.After(startA.At)
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(time.Until(renewed.Seen.Add(rand.N(pauseInterval))))

	var run partitionRun
	run.Cut = time.Now()
	proxy.Cut()
	if lostNode {
		f.g.Expect(testenv.SetNodeLost(f.ctx, f.c, nodeA)).To(Succeed())
	}
	rec.dumpOnFailure(t, run.Cut)
	stopA, err := pa.waitStop(f.ctx, startA.PID, timeout)
	f.g.Expect(err).NotTo(HaveOccurred(), "a stops its child without the API server")
	grantB, err := rec.grantTo(f.ctx, b.UID, grantA.Transitions, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	startB, err := pb.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	run.Stopped, run.Granted, run.StartedB = stopA.At, grantB.AcquireTime, startB.At
	run.Deadline = rec.lastRenewal(grantA.Transitions).Add(pauseLease - pauseMargin)
	t.Logf("lostNode=%v: a's child stopped %s after the cut (%s after a's deadline by the Lease); b granted %s after that, its child started %s after the cut",
		lostNode, run.Stopped.Sub(run.Cut).Round(time.Millisecond), run.Stopped.Sub(run.Deadline).Round(time.Millisecond),
		run.Granted.Sub(run.Stopped).Round(time.Millisecond), run.StartedB.Sub(run.Cut).Round(time.Millisecond))

	// No overlap: a's child did its last act before b was even granted,
	// and it was its deadline that stopped it: nothing reached it.
	f.g.Expect(run.Stopped).To(BeTemporally("<", run.Granted), "a's child stopped before b was granted")
	f.g.Expect(run.StartedB).To(BeTemporally(">", run.Stopped))
	f.g.Expect(run.Granted).To(BeTemporally(">=", run.Deadline), "b granted after a's deadline")
	// fence run asked the child to stop ahead of the deadline by its own
	// clock; the session then ends the grant, by the release that follows
	// the child's exit or by the deadline, whichever comes first.
	line, err := pa.waitLossLine(f.ctx, startA.PID, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(line.Text).To(ContainSubstring(deadlineStop(startA.Token)))
	why, err := pa.waitEndReason(f.ctx, startA.Token, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(why).To(Or(
		ContainSubstring("no successful renewal of the grant with fence %d", startA.Token),
		ContainSubstring("the grant with fence %d was released by this pod", startA.Token)))
	last, _ := pa.lastOf(startA.PID)
	f.g.Expect(last.Kind).To(Equal("stop"), "asked ahead of its deadline, the child stops by itself")

	// The partition heals: a finds b's grant and stays a standby; its old
	// grant is not renewed again.
	proxy.Heal()
	time.Sleep(2 * pauseInterval)
	f.g.Expect(pa.starts()).To(HaveLen(1), "a starts nothing after the partition")
	f.g.Expect(rec.renewalsAfter(grantA.Transitions, run.Cut)).To(BeEmpty(), "a's old grant is not renewed after the cut")
	f.g.Expect(pb.starts()).To(HaveLen(1))
	last, _ = pb.lastOf(startB.PID)
	f.g.Expect(last.Kind).To(Equal("beat"), "b's child still runs")
	return run
}

// partitionRuns runs n partitioned-holder runs as parallel subtests.
func partitionRuns(t *testing.T, n int, lostNode bool) []partitionRun {
	bin := buildBinaries(t)
	return parallelRuns(t, n, func(i int) string { return fmt.Sprintf("%03d", i) },
		func(t *testing.T, _ int) partitionRun { return partitioned(t, bin, lostNode) })
}

// TestFenceRunPartitioned: a holder cut off from the API server stops its
// child at its deadline, before anyone else is granted.
func TestFenceRunPartitioned(t *testing.T) {
	t.Parallel()
	partitionRuns(t, 1, false)
}

// TestFenceRunOnALostNode: a holder whose node is lost (its API access cut,
// and the node marked lost at the same moment) fails over in about one
// lease duration, without overlap: the operator revokes at once but waits
// out the lease, and the holder stops on its own clock.
func TestFenceRunOnALostNode(t *testing.T) {
	t.Parallel()
	r := partitionRuns(t, 1, true)[0]
	t.Logf("failover (the cut to b's child starting): %s with a %s lease", r.StartedB.Sub(r.Cut).Round(time.Millisecond), pauseLease)
}

// TestSessionPartitioned is the partition for a Go holder: pkg/fence's
// Session reaches the API server through the proxy; once cut off, its holder
// context ends at its deadline, before b's session is granted.
func TestSessionPartitioned(t *testing.T) {
	f := newFixture(t)
	rec := f.recordLease("db")
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(pauseLease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(pauseInterval / time.Second))
	})
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	proxy := startProxy(t, apiAddr())
	sa := f.session(a, func(c *fence.APIConfig) { c.Host = "https://" + proxy.Addr() })
	hctx, ga, err := sa.HolderContext(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	sb := f.session(b, nil)
	grantA, err := rec.grantTo(f.ctx, a.UID, 0, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	renewed, err := rec.wait(f.ctx, timeout, "renewed by a", func(v leaseVersion) bool {
		return v.Transitions == grantA.Transitions && v.RenewTime.After(grantA.AcquireTime)
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(time.Until(renewed.Seen.Add(rand.N(pauseInterval))))
	cut := time.Now()
	proxy.Cut()
	rec.dumpOnFailure(t, cut)

	<-hctx.Done()
	stopped := time.Now()
	f.g.Expect(errors.Is(context.Cause(hctx), fence.ErrLost)).To(BeTrue())
	f.g.Expect(context.Cause(hctx).Error()).To(ContainSubstring("no successful renewal"))
	_, holds := sa.Current()
	f.g.Expect(holds).To(BeFalse())
	gb, err := sb.WaitHolder(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(gb.Fence).To(BeNumerically(">", ga.Fence))
	grantB, err := rec.grantTo(f.ctx, b.UID, grantA.Transitions, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Logf("a's holder context ended %s after the cut; b granted %s after that", stopped.Sub(cut).Round(time.Millisecond),
		grantB.AcquireTime.Sub(stopped).Round(time.Millisecond))
	f.g.Expect(grantB.AcquireTime).To(BeTemporally(">", stopped), "a stopped before b was granted")
	f.g.Expect(strings.Contains(context.Cause(hctx).Error(), fmt.Sprint(ga.Fence))).To(BeTrue())
}

// TestFenceRunStopsAChildThatIgnoresSIGTERMByItsDeadline: a holder cut off
// from the API server runs a child that goes on working after SIGTERM, with
// a grace period longer than the whole lease. fence run must ask it to stop
// ahead of its deadline and kill it at the deadline at the latest: its
// validity ends there, and with takeover Safe another pod may be granted
// right after. A SIGKILL only a grace period after the deadline would leave
// it working next to the next holder.
func TestFenceRunStopsAChildThatIgnoresSIGTERMByItsDeadline(t *testing.T) {
	bin := buildBinaries(t)
	f := newFixture(t)
	rec := f.recordLease("db")
	f.fencedLease(func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = int32(pauseLease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(pauseInterval / time.Second))
	})
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	_, err := rec.wait(f.ctx, timeout, "created", func(leaseVersion) bool { return true })
	f.g.Expect(err).NotTo(HaveOccurred())
	proxy := startProxy(t, apiAddr())
	pa := f.startHolder(bin, a, holderOptions{API: proxy.Addr(), Margin: pauseMargin, Grace: 10 * time.Second, ChildIgnoresTerm: true})
	f.startHolder(bin, b, holderOptions{Margin: pauseMargin})

	startA, err := pa.waitStart(f.ctx, 1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	grantA, err := rec.grantTo(f.ctx, a.UID, 0, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	_, err = rec.wait(f.ctx, timeout, "renewed by a", func(v leaseVersion) bool {
		return v.Transitions == grantA.Transitions && v.RenewTime.After(startA.At)
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	cut := time.Now()
	proxy.Cut()
	rec.dumpOnFailure(t, cut)
	grantB, err := rec.grantTo(f.ctx, b.UID, grantA.Transitions, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	deadline := rec.lastRenewal(grantA.Transitions).Add(pauseLease - pauseMargin)
	// Well past b's grant, so that a child still working would show it.
	time.Sleep(time.Until(grantB.AcquireTime.Add(2 * time.Second)))

	var term, last childEvent
	for _, e := range pa.events() {
		if e.PID != startA.PID {
			continue
		}
		if e.Kind == "term" && term.At.IsZero() {
			term = e
		}
		last = e
	}
	t.Logf("a's child: asked to stop %s before a's deadline, last worked %s before it; b granted %s after the deadline",
		deadline.Sub(term.At).Round(time.Millisecond), deadline.Sub(last.At).Round(time.Millisecond),
		grantB.AcquireTime.Sub(deadline).Round(time.Millisecond))
	f.g.Expect(term.At).NotTo(BeZero(), "the child was asked to stop")
	f.g.Expect(term.At).To(BeTemporally("<", deadline), "asked to stop before its deadline")
	f.g.Expect(last.Kind).To(Equal("beat"), "the child never stopped by itself: it was killed")
	f.g.Expect(last.At).To(BeTemporally("<", grantB.AcquireTime), "a's child worked after b was granted")
	f.g.Expect(last.At).To(BeTemporally("<", deadline.Add(100*time.Millisecond)), "a's child worked past its deadline")
}
