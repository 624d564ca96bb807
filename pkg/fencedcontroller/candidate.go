package fencedcontroller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// session is what the candidate needs of a *fence.Session.
type session interface {
	HolderContext(ctx context.Context) (context.Context, fence.Grant, error)
	Current() (fence.Grant, bool)
	Deadline(fence int64) (time.Time, bool)
	Changed() <-chan struct{}
	Renewal() string
	ReleaseGrant(ctx context.Context, fence int64) error
	Close() error
}

// candidate is the manager's runnable that holds the FencedLease: it
// follows the pod's grants through a Session and runs the runnables that
// need leader election for one grant, its term.
type candidate struct {
	opts    Options
	log     logr.Logger
	connect func(ctx context.Context) (session, error)
	elected chan struct{}

	mu        sync.Mutex
	runnables []manager.Runnable
	s         session
	term      *term
	ended     bool   // the term ended (or the candidate stopped): nothing starts again
	why       string // why no grant is held, for a refused write
}

func newCandidate(o Options, log logr.Logger) *candidate {
	c := &candidate{opts: o, log: log, elected: make(chan struct{}),
		why: fmt.Sprintf("this pod holds no grant of FencedLease %s/%s yet", o.Namespace, o.Lease)}
	c.connect = func(ctx context.Context) (session, error) {
		return fence.NewSession(ctx, fence.SessionConfig{API: o.API, Namespace: o.Namespace, Lease: o.Lease, Margin: o.Margin,
			Logf: func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }})
	}
	return c
}

// NeedLeaderElection is false: the candidate runs on every replica.
func (c *candidate) NeedLeaderElection() bool { return false }

// add runs r under the grant: now if the term runs, else once it starts.
func (c *candidate) add(r manager.Runnable) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return fmt.Errorf("FencedLease %s/%s: the controllers' grant has ended: nothing more starts in this process", c.opts.Namespace, c.opts.Lease)
	}
	c.runnables = append(c.runnables, r)
	if c.term != nil {
		c.term.start(r)
	}
	return nil
}

// Start follows the FencedLease until this pod holds a grant, runs the
// runnables under it, and stops them when it ends: at the latest StopLead
// before its deadline (holder renewal), or as soon as the Lease moves on.
// It then returns ErrLeaderElectionLost, so that the manager stops and
// the program exits. When the manager is stopped instead (ctx), it stops
// them, releases the grant if ReleaseOnCancel, and returns nil.
func (c *candidate) Start(ctx context.Context) error {
	defer c.end()
	s, err := c.dial(ctx)
	if err != nil {
		return nil // the manager stopped first
	}
	defer s.Close()
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
	c.log.Info("Waiting to hold the FencedLease")
	if err := c.awaitGrant(ctx, s); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	hctx, g, err := s.HolderContext(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("FencedLease %s/%s: %w", c.opts.Namespace, c.opts.Lease, err)
	}
	if !g.HolderRenews {
		return c.refuseOperatorRenewal()
	}
	t := c.begin(hctx, g)
	c.log.Info("Holding the FencedLease: starting the controllers", "fence", g.Fence)
	lost := c.hold(ctx, s, t)
	c.stop(t, lost)
	returned := c.wait(s, t)
	switch {
	case errors.Is(lost, errRunnable):
		return lost
	case lost != nil:
		return fmt.Errorf("%w: FencedLease %s/%s: %w", ErrLeaderElectionLost, c.opts.Namespace, c.opts.Lease, lost)
	case c.opts.ReleaseOnCancel && returned:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.ReleaseGrant(rctx, g.Fence); err != nil {
			c.log.Error(err, "Cannot release the grant: it expires instead", "fence", g.Fence)
		}
	}
	return nil
}

// dial starts the Session, again and again until it starts or ctx ends:
// the FencedLease's Lease may not exist yet when the pod starts.
func (c *candidate) dial(ctx context.Context) (session, error) {
	backoff := 500 * time.Millisecond
	for {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := c.connect(dctx)
		cancel()
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.log.Error(err, "Cannot follow the FencedLease yet; retrying", "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// ErrOperatorRenewal is what Manager.Start returns, wrapped with the
// FencedLease's name, when the FencedLease's grants are renewed by the
// operator (spec.renewal: Operator). A fenced manager must stop its
// controllers on its own clock before another pod can be granted, and
// under Operator renewal a pod cannot know when its grant ends: the
// operator vouches for quiet grants without writing the Lease, so there is
// no renewal for the pod to watch, and a pod cut off from the API server
// learns nothing at all. Under spec.renewal: Holder the pod renews its own
// grant and holds it only until its own deadline.
var ErrOperatorRenewal = errors.New("a fenced controller needs spec.renewal: Holder")

// awaitGrant waits until this pod holds a grant. It refuses a FencedLease
// whose grants the operator renews as soon as its Lease says so: the
// operator records the mode with every grant, to this pod or another, so
// that is when the Lease is first read if it was ever granted, and at its
// first grant otherwise; before any controller starts either way.
func (c *candidate) awaitGrant(ctx context.Context, s session) error {
	for {
		changed := s.Changed()
		if s.Renewal() == renewalOperator {
			return c.refuseOperatorRenewal()
		}
		if _, ok := s.Current(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// renewalOperator is the renewal mode that the Lease of a FencedLease
// with spec.renewal: Operator records (fence.Session.Renewal).
const renewalOperator = "Operator"

func (c *candidate) refuseOperatorRenewal() error {
	err := fmt.Errorf("FencedLease %s/%s: its grants are renewed by the operator (spec.renewal: Operator), so this pod cannot know on its own clock when its grant ends "+
		"(the operator vouches for quiet grants without writing the Lease; a pod cut off from the API server learns nothing): "+
		"set spec.renewal: Holder, under which the pod renews its own grant and stops its controllers before its own deadline: %w",
		c.opts.Namespace, c.opts.Lease, ErrOperatorRenewal)
	c.mu.Lock()
	c.why = err.Error()
	c.mu.Unlock()
	c.log.Error(err, "Refusing to run the controllers")
	return err
}

// begin starts the term of grant g: the runnables added so far start
// under a context that ends with the grant.
func (c *candidate) begin(hctx context.Context, g fence.Grant) *term {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := newTerm(hctx, g)
	c.term = t
	for _, r := range c.runnables {
		t.start(r)
	}
	close(c.elected)
	return t
}

// errRunnable marks the failure of a runnable, which stops the manager as
// it would without a FencedLease.
var errRunnable = errors.New("a controller failed")

// hold waits until the term must end and says why: nil when the manager
// stops (ctx); otherwise the grant ended, or is about to end unrenewed
// (StopLead before the deadline), or a runnable failed (errRunnable).
func (c *candidate) hold(ctx context.Context, s session, t *term) error {
	for {
		changed := s.Changed()
		cur, ok := s.Current()
		if !ok || cur.Fence != t.grant.Fence {
			return fmt.Errorf("this pod no longer holds the grant with fence %d", t.grant.Fence)
		}
		if why, end := c.holdUntilChange(ctx, t, cur, changed); end {
			return why
		}
	}
}

// holdUntilChange waits for the next change of the Session; end says that
// the term must end, why says why (see hold).
func (c *candidate) holdUntilChange(ctx context.Context, t *term, cur fence.Grant, changed <-chan struct{}) (why error, end bool) {
	var soft <-chan time.Time
	if cur.HolderRenews {
		timer := time.NewTimer(time.Until(stopAt(cur, c.opts.StopLead)))
		defer timer.Stop()
		soft = timer.C
	}
	select {
	case <-ctx.Done():
		return nil, true
	case <-t.hctx.Done():
		if ctx.Err() != nil {
			return nil, true
		}
		return context.Cause(t.hctx), true
	case err := <-t.failed:
		return fmt.Errorf("%w: %w", errRunnable, err), true
	case <-soft:
		return fmt.Errorf("the grant with fence %d was not renewed in time: %s", t.grant.Fence, stopWhen(time.Until(cur.Deadline))), true
	case <-changed:
		return nil, false
	}
}

// stopWhen says when a stop comes, left before the deadline: ahead of it,
// or, for a process that was paused past it, after it.
func stopWhen(left time.Duration) string {
	if left < 0 {
		return fmt.Sprintf("stopping %s after its deadline (the process was paused past it)", (-left).Round(time.Millisecond))
	}
	return fmt.Sprintf("stopping %s before its deadline", left.Round(time.Millisecond))
}

// stop ends the term: from now on the client refuses every write, and the
// runnables' context is cancelled.
func (c *candidate) stop(t *term, why error) {
	c.mu.Lock()
	c.ended = true
	if why == nil {
		why = errors.New("the manager stopped")
	}
	c.why = fmt.Sprintf("its grant of FencedLease %s/%s with fence %d ended: %v", c.opts.Namespace, c.opts.Lease, t.grant.Fence, why)
	c.mu.Unlock()
	c.log.Info("Stopping the controllers", "fence", t.grant.Fence, "reason", why.Error())
	t.stop(why)
}

// wait waits for the runnables to return, no later than the grant's
// deadline (holder renewal) or StopLead (operator renewal), and says
// whether they all did.
func (c *candidate) wait(s session, t *term) bool {
	limit := time.Now().Add(c.opts.StopLead)
	if d, ok := s.Deadline(t.grant.Fence); ok {
		limit = d
	}
	late := time.Since(limit)
	if t.waitUntil(limit) {
		c.log.Info("The controllers stopped", "fence", t.grant.Fence)
		return true
	}
	if late > 0 {
		c.log.Info("The grant's deadline had passed when its controllers were stopped (the process was paused or starved): what they still send is refused by the client or rejected by the webhook",
			"fence", t.grant.Fence, "late", late.Round(time.Millisecond))
		return false
	}
	c.log.Info("Some controllers did not stop by the deadline of the grant: what they still send is refused by the client or rejected by the webhook", "fence", t.grant.Fence)
	return false
}

// end marks the candidate stopped, whatever happened.
func (c *candidate) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
}

// stopAt is when the runnables of a grant renewed by its holder are
// stopped unless it is renewed again first: lead before its deadline, but
// no earlier than half way between the renewal falling due and the
// deadline, so that a renewal that succeeds late but in time stops nothing.
func stopAt(g fence.Grant, lead time.Duration) time.Time {
	due := g.Renewed.Add(g.RenewInterval)
	return g.Deadline.Add(-min(lead, max(g.Deadline.Sub(due)/2, 0)))
}

// heldGrant is the Grants of the manager's client: the grant of the
// running term, while the Session still holds it.
type heldGrant struct{ c *candidate }

// Current returns the term's grant while the term runs and the Session
// holds it, by its own clock.
func (h heldGrant) Current() (fence.Grant, bool) {
	h.c.mu.Lock()
	t, s, ended := h.c.term, h.c.s, h.c.ended
	h.c.mu.Unlock()
	if t == nil || ended || s == nil {
		return fence.Grant{}, false
	}
	g, ok := s.Current()
	if !ok || g.Fence != t.grant.Fence || !g.HolderRenews {
		return fence.Grant{}, false
	}
	return g, true
}

func (h heldGrant) notHeld() string {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	if h.c.term != nil && !h.c.ended {
		return fmt.Sprintf("its grant of FencedLease %s/%s with fence %d is no longer valid by its own clock", h.c.opts.Namespace, h.c.opts.Lease, h.c.term.grant.Fence)
	}
	return h.c.why
}
