package holder_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// handoff is what one handoff measured, from the grant write (the Lease's
// acquireTime, taken by the operator just before it sends the write).
type handoff struct {
	// Start is when the new holder's child started: fence run learned that
	// its pod holds the lease and started its work.
	Start time.Duration
	// Commit is when the test's watch saw the grant committed (state held,
	// fence recorded): what a holder may act on.
	Commit time.Duration
	// Files is, in Operator mode, when the new holder's token files were
	// swapped to name it holder.
	Files time.Duration
}

// learner is one FencedLease whose two pods hand the lease to each other.
type learner struct {
	mode     fencingv1alpha1.RenewalMode
	rec      *leaseRecorder
	files    *kubeletFiles
	pods     [2]*corev1.Pod
	procs    [2]*holderProc
	cur      int   // index of the holder
	grant    int32 // transitions of the current grant
	fence    int64
	handoffs []handoff
}

// learningRuns hands each of two FencedLeases, one with renewal Holder (its
// holders follow their Lease through the API server) and one with renewal
// Operator (its holders follow their token files, rewritten from the pods'
// annotations by kubeletFiles at once, with the kubelet's atomic writer),
// n times between its two pods, alternating between the two so that both
// run under the same load. A handoff: the holder's containers stop being
// ready; with takeover Immediate the operator grants the other pod at once;
// the test measures from the grant write to the start of the new holder's
// child under fence run. Asserted every handoff: the new child runs with
// the new grant's fence, higher than the last, and the old one stops.
func learningRuns(t *testing.T, n int) map[fencingv1alpha1.RenewalMode][]handoff {
	bin := buildBinaries(t)
	f := newFixture(t)
	files := f.kubeletFiles()
	var ls []*learner
	for _, mode := range []fencingv1alpha1.RenewalMode{fencingv1alpha1.RenewalHolder, fencingv1alpha1.RenewalOperator} {
		name := map[fencingv1alpha1.RenewalMode]string{fencingv1alpha1.RenewalHolder: "holder", fencingv1alpha1.RenewalOperator: "operator"}[mode]
		sel := map[string]string{"app": name}
		l := &learner{mode: mode, rec: f.recordLease(name), files: files}
		f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, name, sel, func(fl *fencingv1alpha1.FencedLease) {
			fl.Spec.Renewal = mode
			fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
			fl.Spec.LeaseDurationSeconds = 10
		}))).To(Succeed())
		_, err := l.rec.wait(f.ctx, timeout, "created", func(leaseVersion) bool { return true })
		f.g.Expect(err).NotTo(HaveOccurred())
		for i, readyFor := range []time.Duration{time.Hour, time.Minute} {
			pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name + "-" + string(rune('a'+i)), Labels: sel, ServiceAccount: "default"})
			f.g.Expect(err).NotTo(HaveOccurred())
			o := holderOptions{Lease: name}
			if mode == fencingv1alpha1.RenewalOperator {
				o.Renewal, o.Files = "operator", files.volume(f, pod, name)
			}
			l.pods[i], l.procs[i] = pod, f.startHolder(bin, pod, o)
			f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
		}
		start, err := l.procs[0].waitStart(f.ctx, 1, timeout)
		f.g.Expect(err).NotTo(HaveOccurred())
		g, err := l.rec.grantTo(f.ctx, l.pods[0].UID, 0, timeout)
		f.g.Expect(err).NotTo(HaveOccurred())
		l.grant, l.fence = g.Transitions, start.Token
		ls = append(ls, l)
	}
	for range n {
		for _, l := range ls {
			l.handOver(f)
		}
	}
	out := map[fencingv1alpha1.RenewalMode][]handoff{}
	for _, l := range ls {
		out[l.mode] = l.handoffs
	}
	return out
}

// handOver makes the holder unready and measures how soon the other pod's
// child starts after the grant to it is written.
func (l *learner) handOver(f *fixture) {
	from, to := l.cur, 1-l.cur
	starts := len(l.procs[to].starts())
	old := l.procs[from].starts()
	f.g.Expect(old).NotTo(BeEmpty())
	oldPID := old[len(old)-1].PID
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, l.pods[from])).To(Succeed())
	start, err := l.procs[to].waitStart(f.ctx, starts+1, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	grant, err := l.rec.grantTo(f.ctx, l.pods[to].UID, l.grant, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	commit, err := l.rec.committed(f.ctx, grant.Transitions, timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(start.Token).To(Equal(commit.Fence), "the new holder runs with the new grant's fence")
	f.g.Expect(start.Token).To(BeNumerically(">", l.fence))
	h := handoff{Start: start.At.Sub(grant.AcquireTime), Commit: commit.Seen.Sub(grant.AcquireTime)}
	if l.mode == fencingv1alpha1.RenewalOperator {
		if swapped, ok := l.files.swappedAfter(l.pods[to].UID, grant.AcquireTime); ok {
			h.Files = swapped.Sub(grant.AcquireTime)
		}
	}
	_, err = l.procs[from].waitStop(f.ctx, oldPID, timeout)
	f.g.Expect(err).NotTo(HaveOccurred(), "the old holder's child stops")
	f.g.Expect(testenv.SetReady(f.ctx, f.c, l.pods[from], time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	l.cur, l.grant, l.fence = to, grant.Transitions, start.Token
	l.handoffs = append(l.handoffs, h)
}

// TestHolderLearnsOfItsGrant is the short variant of the learning-latency
// measurement (make holder-bench hands over 50 times per mode).
func TestHolderLearnsOfItsGrant(t *testing.T) {
	for mode, hs := range learningRuns(t, 3) {
		var d dist
		for _, h := range hs {
			d = append(d, h.Start)
		}
		t.Logf("%s: grant write to the new holder's child starting: %s", mode, d)
	}
}
