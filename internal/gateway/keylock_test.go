package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestKeyLocks(t *testing.T) {
	g := NewWithT(t)
	var k keyLocks
	ctx := context.Background()
	a, ok := k.tryLock("a")
	g.Expect(ok).To(BeTrue())
	b, err := k.lock(ctx, "b", 0, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.size()).To(Equal(2))
	_, ok = k.tryLock("a")
	g.Expect(ok).To(BeFalse())

	// A wait ends with its context, or after its own timeout, and leaves
	// no entry behind.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err = k.lock(cctx, "a", 0, 0)
	g.Expect(err).To(MatchError(context.Canceled))
	_, err = k.lock(ctx, "a", 0, 10*time.Millisecond)
	g.Expect(err).To(MatchError(context.DeadlineExceeded))

	// A waiting write of a higher fence preempts the holder's upload; one
	// of the same fence waits.
	up := &gate{wr: Write{Bucket: "b", Key: "a"}, fence: 41, grantAt: time.Now(), maxAge: time.Hour}
	a.holding(41, up)
	_, err = k.lock(ctx, "a", 41, 10*time.Millisecond)
	g.Expect(err).To(HaveOccurred())
	g.Expect(up.commit(ctx)).To(BeNil(), "not preempted by its own fence")
	up2 := &gate{wr: Write{Bucket: "b", Key: "a"}, fence: 41, grantAt: time.Now(), maxAge: time.Hour}
	a.holding(41, up2)
	got := make(chan *lockHandle)
	go func() {
		h, err := k.lock(ctx, "a", 42, 0)
		g.Expect(err).NotTo(HaveOccurred())
		got <- h
	}()
	waiting := func() int {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(k.locks["a"].waiting)
	}
	g.Eventually(waiting).Should(Equal(1))
	g.Expect(up2.commit(ctx)).To(MatchError(
		"write to b/a with fence 41 denied: a write with fence 42, a newer grant of FencedLease /, arrived while it was in flight (nothing was written)"))
	var r *refusal
	g.Expect(errors.As(up2.commit(ctx), &r)).To(BeTrue())
	g.Expect(r.d.Reason).To(Equal(ReasonSuperseded))
	a.unlock()
	h := <-got

	// An upload registered while a higher fence waits is preempted at once.
	go func() {
		h2, err := k.lock(ctx, "a", 50, 0)
		g.Expect(err).NotTo(HaveOccurred())
		got <- h2
	}()
	g.Eventually(waiting).Should(Equal(1))
	up3 := &gate{wr: Write{Bucket: "b", Key: "a"}, fence: 42, grantAt: time.Now(), maxAge: time.Hour}
	h.holding(42, up3)
	g.Expect(up3.commit(ctx)).To(HaveOccurred())
	h.unlock()
	(<-got).unlock()
	b.unlock()
	g.Expect(k.size()).To(BeZero(), "no entry outlives its writes")
}
