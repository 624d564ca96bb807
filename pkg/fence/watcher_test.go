package fence_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// Generous bounds: they only limit how long a broken implementation hangs.
const (
	eventually = 10 * time.Second
	poll       = 10 * time.Millisecond
)

func newWatcher(t testing.TB, dir string, opts ...fence.Option) *fence.Watcher {
	t.Helper()
	w, err := fence.New(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// TestHolderContextLoss checks that losing holdership cancels the context,
// through events alone (polling too slow to matter) and through polling
// alone.
func TestHolderContextLoss(t *testing.T) {
	tests := []struct {
		name string
		opts []fence.Option
	}{
		{name: "events", opts: []fence.Option{fence.WithPollInterval(time.Hour)}},
		{name: "polling only", opts: []fence.Option{fence.WithoutEvents(), fence.WithPollInterval(20 * time.Millisecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			k := newKubelet(t)
			g.Expect(k.Holder(41, "db")).To(Succeed())
			w := newWatcher(t, k.Dir(), tt.opts...)

			hctx, tok, err := w.HolderContext(t.Context())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tok).To(Equal(fence.Token{Role: fence.RoleHolder, Fence: 41, Lease: "db"}))
			g.Consistently(hctx.Done()).WithTimeout(100 * time.Millisecond).ShouldNot(BeClosed())

			g.Expect(k.Standby("db")).To(Succeed())
			g.Eventually(hctx.Done()).WithTimeout(eventually).WithPolling(poll).Should(BeClosed())
			cause := context.Cause(hctx)
			g.Expect(cause).To(MatchError("holdership lost: role is now standby"))
			g.Expect(errors.Is(cause, fence.ErrLost)).To(BeTrue())
			g.Expect(w.Current()).To(Equal(fence.Token{Role: fence.RoleStandby, Lease: "db"}))
		})
	}
}

func TestHolderContextFenceChange(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Holder(41, "db")).To(Succeed())
	w := newWatcher(t, k.Dir())

	hctx, _, err := w.HolderContext(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.Holder(42, "db")).To(Succeed())
	g.Eventually(hctx.Done()).WithTimeout(eventually).WithPolling(poll).Should(BeClosed())
	g.Expect(context.Cause(hctx)).To(MatchError("holdership lost: fence changed from 41 to 42"))

	// The new grant is a new holdership.
	hctx2, tok, err := w.HolderContext(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tok.Fence).To(Equal(int64(42)))
	g.Expect(hctx2.Err()).NotTo(HaveOccurred())
}

func TestHolderContextMalformedAndClose(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Holder(41, "db")).To(Succeed())
	w := newWatcher(t, k.Dir())

	hctx, _, err := w.HolderContext(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.WriteToken("holder", "", "db")).To(Succeed())
	g.Eventually(hctx.Done()).WithTimeout(eventually).WithPolling(poll).Should(BeClosed())
	g.Expect(context.Cause(hctx)).To(MatchError("holdership lost: malformed token file " +
		filepath.Join(k.Dir(), "fence") + ": role is holder but the fence is empty"))

	g.Expect(k.Holder(43, "db")).To(Succeed())
	hctx, _, err = w.HolderContext(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.Close()).To(Succeed())
	g.Eventually(hctx.Done()).WithTimeout(eventually).WithPolling(poll).Should(BeClosed())
	g.Expect(context.Cause(hctx)).To(MatchError(fence.ErrClosed))
	_, err = w.WaitHolder(t.Context())
	g.Expect(err).To(MatchError("wait for holdership: watcher closed"))
}

func TestHolderContextParentCancel(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Holder(41, "db")).To(Succeed())
	w := newWatcher(t, k.Dir())

	parent, cancel := context.WithCancelCause(t.Context())
	hctx, _, err := w.HolderContext(parent)
	g.Expect(err).NotTo(HaveOccurred())
	stop := errors.New("shutting down")
	cancel(stop)
	g.Eventually(hctx.Done()).WithTimeout(eventually).WithPolling(poll).Should(BeClosed())
	g.Expect(context.Cause(hctx)).To(MatchError(stop))
}

func TestWaitHolder(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Standby("db")).To(Succeed())
	w := newWatcher(t, k.Dir(), fence.WithPollInterval(time.Hour))

	type result struct {
		tok fence.Token
		err error
	}
	got := make(chan result, 1)
	go func() {
		tok, err := w.WaitHolder(t.Context())
		got <- result{tok, err}
	}()
	g.Consistently(got).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())
	g.Expect(k.Holder(7, "db")).To(Succeed())
	var r result
	g.Eventually(got).WithTimeout(eventually).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.tok).To(Equal(fence.Token{Role: fence.RoleHolder, Fence: 7, Lease: "db"}))
}

func TestWaitHolderCancel(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Standby("db")).To(Succeed())
	w := newWatcher(t, k.Dir())

	ctx, cancel := context.WithCancel(t.Context())
	errs := make(chan error, 1)
	go func() {
		_, err := w.WaitHolder(ctx)
		errs <- err
	}()
	g.Consistently(errs).WithTimeout(50 * time.Millisecond).ShouldNot(Receive())
	cancel()
	var err error
	g.Eventually(errs).WithTimeout(eventually).Should(Receive(&err))
	g.Expect(err).To(MatchError("wait for holdership: context canceled"))
	g.Expect(errors.Is(err, context.Canceled)).To(BeTrue())
}

func TestWaitHolderMalformed(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.WriteToken("holder", "+5", "db")).To(Succeed())
	w := newWatcher(t, k.Dir())
	_, err := w.WaitHolder(t.Context())
	want := "malformed token file " + filepath.Join(k.Dir(), "fence") + `: invalid fence "+5": sign not allowed`
	g.Expect(err).To(MatchError(want))
	_, err = w.Current()
	g.Expect(err).To(MatchError(want))
}

func TestNewAbsent(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "fencedlease")
	_, err := fence.New(dir)
	g.Expect(err).To(MatchError("read " + dir + ": " + absentMsg))
	g.Expect(errors.Is(err, fence.ErrAbsent)).To(BeTrue())

	_, err = fence.New(t.TempDir(), fence.WithPollInterval(0))
	g.Expect(err).To(MatchError("poll interval 0s: must be positive"))
}

// TestWatcherPlainFiles covers local development: files written in place.
func TestWatcherPlainFiles(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	writePlain(t, dir, "holder", "3", "db")
	w := newWatcher(t, dir, fence.WithPollInterval(time.Hour))
	hctx, tok, err := w.HolderContext(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tok.Fence).To(Equal(int64(3)))
	writePlain(t, dir, "standby", "", "db")
	g.Eventually(hctx.Done()).WithTimeout(eventually).WithPolling(poll).Should(BeClosed())
	g.Expect(errors.Is(context.Cause(hctx), fence.ErrLost)).To(BeTrue())
}
