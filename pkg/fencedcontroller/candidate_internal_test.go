package fencedcontroller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// fakeSession is a Session whose grant the test sets.
type fakeSession struct {
	mu           sync.Mutex
	grant        *fence.Grant
	lastDeadline map[int64]time.Time
	changed      chan struct{}
	released     []int64
	renewal      string
}

func newFakeSession() *fakeSession {
	return &fakeSession{changed: make(chan struct{}), lastDeadline: map[int64]time.Time{}}
}

// set changes the grant (nil: none), as a renewal, a revocation or a new
// grant would.
func (f *fakeSession) set(g *fence.Grant) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grant = g
	if g != nil && g.HolderRenews {
		f.lastDeadline[g.Fence] = g.Deadline
	}
	switch {
	case g != nil && g.HolderRenews:
		f.renewal = "Holder"
	case g != nil:
		f.renewal = "Operator"
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSession) Current() (fence.Grant, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.grant == nil || f.grant.HolderRenews && !time.Now().Before(f.grant.Deadline) {
		return fence.Grant{}, false
	}
	return *f.grant, true
}

func (f *fakeSession) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeSession) Renewal() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewal
}

func (f *fakeSession) Deadline(fenceValue int64) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.lastDeadline[fenceValue]
	return d, ok
}

func (f *fakeSession) HolderContext(ctx context.Context) (context.Context, fence.Grant, error) {
	for {
		changed := f.Changed()
		if g, ok := f.Current(); ok {
			hctx, cancel := context.WithCancelCause(ctx)
			go func() {
				for {
					changed := f.Changed()
					cur, ok := f.Current()
					if !ok || cur.Fence != g.Fence {
						cancel(fence.ErrLost)
						return
					}
					var deadline <-chan time.Time
					if cur.HolderRenews {
						deadline = time.After(time.Until(cur.Deadline))
					}
					select {
					case <-hctx.Done():
						return
					case <-changed:
					case <-deadline:
					}
				}
			}()
			return hctx, g, nil
		}
		select {
		case <-ctx.Done():
			return nil, fence.Grant{}, ctx.Err()
		case <-changed:
		}
	}
}

func (f *fakeSession) ReleaseGrant(_ context.Context, fenceValue int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, fenceValue)
	return nil
}

func (f *fakeSession) Close() error { return nil }

// probe is a runnable that records when it started and stopped.
type probe struct {
	mu               sync.Mutex
	started, stopped time.Time
	fence            int64
	err              error // returned at once when set
}

func (p *probe) Start(ctx context.Context) error {
	p.mu.Lock()
	p.started = time.Now()
	p.fence, _ = FenceFromContext(ctx)
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	<-ctx.Done()
	p.mu.Lock()
	p.stopped = time.Now()
	p.mu.Unlock()
	return nil
}

func (p *probe) times() (started, stopped time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started, p.stopped
}

// run starts a candidate on s with runnable p and returns it, its client's
// Grants and the channel of Start's result.
func run(t *testing.T, s *fakeSession, o Options, p manager.Runnable) (*candidate, heldGrant, <-chan error, context.CancelFunc) {
	t.Helper()
	o.Namespace, o.Lease = "team-a", "widgets"
	if o.StopLead == 0 {
		o.StopLead = DefaultStopLead
	}
	c := newCandidate(o, logr.Discard())
	c.connect = func(context.Context) (session, error) { return s, nil }
	if err := c.add(p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	return c, heldGrant{c}, done, cancel
}

func renewed(fenceValue int64, lease, interval time.Duration) *fence.Grant {
	now := time.Now()
	return &fence.Grant{Lease: "widgets", Fence: fenceValue, HolderRenews: true, Renewed: now, RenewInterval: interval, Deadline: now.Add(lease)}
}

// TestCandidateStopsBeforeItsDeadline: the runnables start only once the
// grant is held; a renewal that comes in time keeps them running; when no
// renewal comes, they are stopped StopLead before the deadline, the client
// refuses writes from then on although the Session still holds the grant,
// and Start reports a lost election, all before the deadline.
func TestCandidateStopsBeforeItsDeadline(t *testing.T) {
	g := NewWithT(t)
	s := newFakeSession()
	p := &probe{}
	c, grants, done, _ := run(t, s, Options{StopLead: 300 * time.Millisecond}, p)
	time.Sleep(100 * time.Millisecond)
	started, _ := p.times()
	g.Expect(started.IsZero()).To(BeTrue(), "a runnable started before the grant was held")
	_, ok := grants.Current()
	g.Expect(ok).To(BeFalse())
	g.Expect(c.elected).NotTo(BeClosed())

	// Held: lease 1s, renew every 100ms; the stop would be at 700ms.
	s.set(renewed(7, time.Second, 100*time.Millisecond))
	g.Eventually(func() time.Time { st, _ := p.times(); return st }).ShouldNot(BeZero())
	g.Expect(c.elected).To(BeClosed())
	g.Expect(p.fence).To(Equal(int64(7)))
	held, ok := grants.Current()
	g.Expect(ok).To(BeTrue())
	g.Expect(held.Fence).To(Equal(int64(7)))

	// Renewed at 500ms: the stop moves to 1.2s.
	time.Sleep(500 * time.Millisecond)
	last := renewed(7, time.Second, 100*time.Millisecond)
	s.set(last)
	time.Sleep(400 * time.Millisecond) // past the first stop
	_, stopped := p.times()
	g.Expect(stopped.IsZero()).To(BeTrue(), "stopped although the grant was renewed in time")

	// No more renewals: stopped 300ms before the deadline.
	var err error
	g.Eventually(done).WithTimeout(2 * time.Second).Should(Receive(&err))
	returned := time.Now()
	_, stopped = p.times()
	g.Expect(errors.Is(err, ErrLeaderElectionLost)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(HavePrefix("leader election lost: FencedLease team-a/widgets: the grant with fence 7 was not renewed in time: stopping "))
	g.Expect(stopped).To(BeTemporally(">=", last.Deadline.Add(-300*time.Millisecond)))
	g.Expect(stopped).To(BeTemporally("<", last.Deadline))
	g.Expect(returned).To(BeTemporally("<", last.Deadline))
	_, ok = s.Current()
	g.Expect(ok).To(BeTrue(), "the Session still holds the grant: only the candidate stopped")
	_, ok = grants.Current()
	g.Expect(ok).To(BeFalse(), "the client writes after the stop")
	g.Expect(grants.notHeld()).To(HavePrefix("its grant of FencedLease team-a/widgets with fence 7 ended: the grant with fence 7 was not renewed in time"))
	g.Expect(c.add(&probe{})).To(MatchError("FencedLease team-a/widgets: the controllers' grant has ended: nothing more starts in this process"))
}

// TestCandidateStopsWhenTheGrantEnds: a grant that ends (revoked, moved on)
// stops the runnables at once.
func TestCandidateStopsWhenTheGrantEnds(t *testing.T) {
	g := NewWithT(t)
	s := newFakeSession()
	p := &probe{}
	_, grants, done, _ := run(t, s, Options{}, p)
	s.set(renewed(9, time.Minute, 10*time.Second))
	g.Eventually(func() time.Time { st, _ := p.times(); return st }).ShouldNot(BeZero())
	ended := time.Now()
	s.set(nil)
	var err error
	g.Eventually(done).Should(Receive(&err))
	g.Expect(errors.Is(err, ErrLeaderElectionLost)).To(BeTrue(), "%v", err)
	_, stopped := p.times()
	g.Expect(stopped).To(BeTemporally("~", ended, 100*time.Millisecond))
	_, ok := grants.Current()
	g.Expect(ok).To(BeFalse())
	// A new grant to the same pod does not revive this process's writes.
	s.set(renewed(12, time.Minute, 10*time.Second))
	_, ok = grants.Current()
	g.Expect(ok).To(BeFalse())
}

// TestCandidateRefusesOperatorRenewal: a FencedLease whose grants the
// operator renews is refused before any runnable starts, whether the Lease
// records a grant to another pod or this pod is granted, and the client
// refuses every write, saying why.
func TestCandidateRefusesOperatorRenewal(t *testing.T) {
	for _, g := range []*fence.Grant{
		nil, // another pod's grant: the Lease records the mode
		{Lease: "widgets", Fence: 9},
	} {
		gm := NewWithT(t)
		s := newFakeSession()
		if g == nil {
			s.renewal = "Operator"
		}
		p := &probe{}
		_, grants, done, _ := run(t, s, Options{}, p)
		if g != nil {
			time.Sleep(100 * time.Millisecond) // no grant recorded yet: the candidate waits
			s.set(g)
		}
		var err error
		gm.Eventually(done).Should(Receive(&err))
		gm.Expect(errors.Is(err, ErrOperatorRenewal)).To(BeTrue(), "%v", err)
		gm.Expect(err.Error()).To(HavePrefix("FencedLease team-a/widgets: its grants are renewed by the operator (spec.renewal: Operator), so this pod cannot know on its own clock when its grant ends"))
		gm.Expect(err.Error()).To(ContainSubstring("set spec.renewal: Holder"))
		started, _ := p.times()
		gm.Expect(started).To(BeZero(), "a runnable started")
		_, ok := grants.Current()
		gm.Expect(ok).To(BeFalse())
		gm.Expect(grants.notHeld()).To(Equal(err.Error()))
	}
}

// TestCandidateManagerStop: stopping the manager stops the runnables,
// releases the grant with ReleaseOnCancel, and is no error.
func TestCandidateManagerStop(t *testing.T) {
	for _, release := range []bool{false, true} {
		g := NewWithT(t)
		s := newFakeSession()
		p := &probe{}
		_, _, done, cancel := run(t, s, Options{ReleaseOnCancel: release}, p)
		s.set(renewed(5, time.Minute, 10*time.Second))
		g.Eventually(func() time.Time { st, _ := p.times(); return st }).ShouldNot(BeZero())
		cancel()
		g.Eventually(done).Should(Receive(BeNil()))
		_, stopped := p.times()
		g.Expect(stopped).NotTo(BeZero())
		if release {
			g.Expect(s.released).To(Equal([]int64{5}))
		} else {
			g.Expect(s.released).To(BeEmpty())
		}
	}
}

// TestCandidateRunnableFails: a failing runnable stops the manager with its
// own error, not as a lost election.
func TestCandidateRunnableFails(t *testing.T) {
	g := NewWithT(t)
	s := newFakeSession()
	_, _, done, _ := run(t, s, Options{}, &probe{err: errors.New("cache did not sync")})
	s.set(renewed(5, time.Minute, 10*time.Second))
	var err error
	g.Eventually(done).Should(Receive(&err))
	g.Expect(err).To(MatchError("a controller failed: cache did not sync"))
	g.Expect(errors.Is(err, ErrLeaderElectionLost)).To(BeFalse())
}

func TestStopAt(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	grant := func(lease, interval time.Duration) fence.Grant {
		return fence.Grant{HolderRenews: true, Renewed: base, RenewInterval: interval, Deadline: base.Add(lease)}
	}
	tests := []struct {
		name  string
		g     fence.Grant
		lead  time.Duration
		after time.Duration // stopAt − Renewed
	}{
		{name: "defaults: 15s lease, 5s interval, 1s margin", g: grant(14*time.Second, 5*time.Second), lead: 2 * time.Second, after: 12 * time.Second},
		{name: "capped half way after the renewal falls due", g: grant(2500*time.Millisecond, time.Second), lead: 2 * time.Second, after: 1750 * time.Millisecond},
		{name: "renewal due after the deadline: at the deadline", g: grant(time.Second, 2*time.Second), lead: 2 * time.Second, after: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(stopAt(tt.g, tt.lead).Sub(base)).To(Equal(tt.after))
		})
	}
}

func TestStopWhenSaysAheadOrPast(t *testing.T) {
	g := NewWithT(t)
	g.Expect(stopWhen(750 * time.Millisecond)).To(Equal("stopping 750ms before its deadline"))
	g.Expect(stopWhen(-2428 * time.Millisecond)).To(Equal("stopping 2.428s after its deadline (the process was paused past it)"))
}
