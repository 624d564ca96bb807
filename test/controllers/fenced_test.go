package controllers_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/controllers/writelog"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// lateWrites is how long a resumed replica writes on.
const lateWrites = 5 * time.Second

// TestFencedControllerPausedPastItsDeadline is the split brain of a
// controller, prevented: the example controller runs in two replicas, two
// processes acting with their pods' bound tokens, as candidates of a
// FencedLease with renewal Holder; its Widgets and their status are
// protected by the fencing webhook. Replica a holds and writes; it is
// stopped (SIGSTOP) until b has been granted (after a's deadline, takeover
// Safe) and has written every Widget; then a is continued and writes on for
// several seconds as if it still held, spec and status, by update and by
// merge patch, each stamped with its old fence (--late-writes: the client's
// own check, which a replica paused between the check and the send gets
// past, is out of the way). None of its writes is accepted: every one is
// rejected by the webhook with a message that names the FencedLease and
// both fences, or, for those of its own controller, refused by its client
// before they were sent; the Widgets keep b's slots and status.
func TestFencedControllerPausedPastItsDeadline(t *testing.T) {
	f := newFixture(t)
	f.startOperator()
	f.g.Expect(admin.Create(f.ctx, testenv.FencedLease(f.ns, "widgets", podLabels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 4
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(1))
	}))).To(Succeed())
	a, b := f.pod("a"), f.pod("b")
	f.widgets(3)
	// Both replicas follow the Lease before a is granted: with holder
	// renewal a grant that its pod does not renew within the lease duration
	// passes on.
	args := []string{"--fenced-lease=widgets", "--resync=500ms", "--late-writes=" + lateWrites.String()}
	ra := f.startReplica(a, args...)
	rb := f.startReplica(b, args...)
	for _, r := range []*replica{ra, rb} {
		f.g.Eventually(func() bool { return r.logged("Waiting to hold the FencedLease") }).WithTimeout(timeout).Should(BeTrue())
	}
	f.ready(a, time.Hour)
	f.ready(b, time.Minute)

	fa := f.waitWidgets("a", 0, timeout)
	f.g.Expect(rb.writes()).To(BeEmpty(), "b's controller wrote before b held the grant")
	for _, w := range f.listWidgets(f.g) {
		f.g.Expect(w.Labels).To(HaveKeyWithValue(fencingv1alpha1.LabelProtectedBy, "widgets"))
		f.g.Expect(w.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fa, 10)))
	}

	pausedAt := time.Now()
	f.g.Expect(ra.freeze()).To(Succeed())
	fb := f.waitWidgets("b", fa, timeout)
	time.Sleep(time.Second) // b writes on
	resumedAt := time.Now()
	f.g.Expect(ra.thaw()).To(Succeed())
	code, err := ra.waitExit(lateWrites + timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(code).To(Equal(1))
	f.g.Expect(ra.logged("leader election lost")).To(BeTrue(), "a's manager reports a lost election")

	run := judge(ra, pausedAt, resumedAt)
	run.Overwritten = f.overwritten()
	t.Logf("fenced: %s", run)
	testenv.WriteResult(t, "CONTROLLERS_FENCED_RESULT", run)

	f.g.Expect(run.Late["accepted"]).To(BeZero(), "late writes of a accepted")
	f.g.Expect(run.Own["accepted"]).To(BeZero(), "writes of a's controller accepted after it was resumed")
	f.g.Expect(run.Late["error"]).To(BeZero())
	f.g.Expect(run.Late["refused"]).To(BeZero(), "the late writes reach the API server")
	f.g.Expect(run.Late["rejected"]).To(BeNumerically(">=", 20))
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(admin.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "widgets"}, fl)).To(Succeed())
	f.g.Expect(fl.Status.Fence).To(Equal(fb), "no grant after b's")
	seen := map[string]bool{}
	for _, w := range ra.writes() {
		if w.Result != "rejected" {
			continue
		}
		seen[w.Part+" "+w.Verb] = true
		f.g.Expect(w.Fence).To(Equal(fa))
		f.g.Expect(w.Error).To(ContainSubstring(`FencedLease "widgets"`))
		f.g.Expect(w.Error).To(MatchRegexp(`\b`+strconv.FormatInt(fa, 10)+`\b`), "the message names a's fence")
		f.g.Expect(w.Error).To(MatchRegexp(`\b`+strconv.FormatInt(fb, 10)+`\b`), "the message names the current fence")
	}
	f.g.Expect(seen).To(Equal(map[string]bool{"spec update": true, "spec patch": true, "status update": true, "status patch": true}))

	// The Widgets are as b left them: the slots a gave them (b had no
	// reason to write a spec again, so the stored fence is still a's: a's
	// late updates and patches, with that same fence, were rejected all
	// the same), and b's status.
	f.g.Expect(run.Overwritten).To(BeZero())
	f.waitWidgets("b", fa, timeout)
	for _, w := range f.listWidgets(f.g) {
		f.g.Expect(w.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fa, 10)))
	}
	f.g.Expect(writelog.Count(writelog.SentAfter(rb.writes(), resumedAt))[writelog.Accepted]).To(BeNumerically(">", 0), "b writes on")
}

// judge counts what replica r wrote after it was resumed, and when its
// manager reported the loss.
func judge(r *replica, pausedAt, resumedAt time.Time) writelog.SplitBrain {
	run := writelog.Judge(r.writes(), pausedAt, resumedAt)
	for _, l := range r.out.Lines() {
		if strings.Contains(l.Text, "Problem running manager") && l.At.After(resumedAt) {
			run.Noticed = l.At.Sub(resumedAt)
			break
		}
	}
	return run
}

// overwritten counts the Widgets with a slot from a stale view.
func (f *fixture) overwritten() int {
	n := 0
	for _, w := range f.listWidgets(f.g) {
		if w.Spec.Slot != nil && *w.Spec.Slot >= 1000 {
			n++
		}
	}
	return n
}
