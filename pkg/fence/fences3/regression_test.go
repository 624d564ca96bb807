package fences3_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence/fences3"
)

// isGet matches a GET of a key (path-style), as a read of the pointer is.
func isGet(bucket, k string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == "/"+bucket+"/"+k }
}

// TestStaleLeftoversNeverBeatTheNewHolder: A, holder with fence 41, passes
// the pointer check and writes its version of an operation, then pauses
// before it moves the pointer. B, granted 42, runs the same operation (the
// same operation ID, as a retried job would): B's write is applied, not
// refused because of A's leftover version. A resumes and is told it is
// stale; B's retry is told the operation is applied; readers get B's report.
// And the other order: A's write of the operation landed before B wrote:
// the operation is done (as fencesql's operations table says), and A is
// stale from B's next write on.
func TestStaleLeftoversNeverBeatTheNewHolder(t *testing.T) {
	const op = "report-2026-11"
	t.Run("A paused between its version and the pointer", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		px := newProxied(t)
		a, b := px.slow, px.direct
		_, err := b.Put(ctx, key, "earlier", 40, body("earlier report"))
		g.Expect(err).NotTo(HaveOccurred())

		held, release := px.proxy.Hold(isPut(px.bucket, key))
		t.Cleanup(release) // before the proxy closes, on any failure
		aDone := putLater(ctx, a, op, 41, "report by A")
		<-held // A's pointer move waits on its way to the store

		_, err = b.Put(ctx, key, op, 42, body("report by B"))
		g.Expect(err).NotTo(HaveOccurred(), "B's write must not be refused because of A's leftover version")
		release()
		g.Expect(errors.Is(<-aDone, fences3.ErrStale)).To(BeTrue(), "A resumed after B wrote: stale")

		_, err = b.Put(ctx, key, op, 42, body("report by B"))
		g.Expect(errors.Is(err, fences3.ErrAlreadyApplied)).To(BeTrue(), "B's retry: %v", err)
		content, p := read(g, b)
		g.Expect(content).To(Equal("report by B"))
		g.Expect(p.Fence).To(Equal(int64(42)))
	})
	t.Run("A's write landed before B wrote anything", func(t *testing.T) {
		// As with fencesql: the operation is applied once, whichever grant
		// applied it; what B writes next is accepted and A is stale.
		g := NewWithT(t)
		ctx := context.Background()
		bucket := newBucket(t)
		st := fences3.New(srv.Client(""), bucket)
		_, err := st.Put(ctx, key, op, 41, body("report by A"))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = st.Put(ctx, key, op, 42, body("report by B"))
		g.Expect(errors.Is(err, fences3.ErrAlreadyApplied)).To(BeTrue(), "B's run of the operation A applied: %v", err)
		_, err = st.Put(ctx, key, "next", 42, body("next report by B"))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = st.Put(ctx, key, "later", 41, body("later report by A"))
		g.Expect(errors.Is(err, fences3.ErrStale)).To(BeTrue(), "A's next write after B wrote: %v", err)
		content, _ := read(g, st)
		g.Expect(content).To(Equal("next report by B"))
	})
}

// TestReplayOfAForgottenOutcomeIsRefused: the reply to an operation's
// pointer move is lost, and before its read-back more moves follow than
// the pointer remembers. The read-back cannot tell, and says so
// (ErrUnknownOutcome). A replay of the operation with the same ID must not
// apply it a second time (which would bring the old report back over the
// newer ones): it is refused with ErrOutcomeLost, and nothing changes.
func TestReplayOfAForgottenOutcomeIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	px := newProxied(t)
	bucket, proxy, slow, direct := px.bucket, px.proxy, px.slow, px.direct
	_, err := direct.Put(ctx, key, "op-0", 42, body("first"))
	g.Expect(err).NotTo(HaveOccurred())

	proxy.DropNext(1, isPut(bucket, key))
	// The read-back after the lost reply waits until the others have written.
	held, release := proxy.Hold(isGet(bucket, key))
	t.Cleanup(release)
	done := putLater(ctx, slow, "op-x", 42, "report x")
	// The first read held is the write's own first read of the pointer:
	// let it go, and hold the next one, the read-back.
	<-held
	held2, release2 := proxy.Hold(isGet(bucket, key))
	t.Cleanup(release2)
	release()
	<-held2
	others := fences3.RecentOps + 1
	for i := range others {
		_, err := direct.Put(ctx, key, fmt.Sprintf("other-%d", i), 42, body(fmt.Sprintf("other %d", i)))
		g.Expect(err).NotTo(HaveOccurred())
	}
	release2()
	err = <-done
	g.Expect(errors.Is(err, fences3.ErrUnknownOutcome)).To(BeTrue(), "the read-back cannot tell: %v", err)

	want := fmt.Sprintf("other %d", others-1)
	content, before := read(g, direct)
	g.Expect(content).To(Equal(want))

	// The replay, by the same grant, and by the next grant (another fence,
	// so another version key) after a restart.
	for _, f := range []int64{42, 43} {
		_, err = direct.Put(ctx, key, "op-x", f, body("report x"))
		g.Expect(errors.Is(err, fences3.ErrOutcomeLost)).To(BeTrue(), "the replay with fence %d must be refused, not applied again: %v", f, err)
		content, after := read(g, direct)
		g.Expect(content).To(Equal(want), "nothing changed")
		g.Expect(after).To(Equal(before))
	}
}
