//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/pkg/fence"
)

// Releases of a renewal Holder process, per look while it holds (a few
// times a second) or, for the late release, per look as a standby.
const (
	// releaseChance: it stops its work and releases the grant it holds;
	// shortReleaseChance of those releases get a client deadline of a few
	// milliseconds (outcome unknown).
	releaseChance      = 0.02
	shortReleaseChance = 0.4
	// releaseEndedChance: when it notices its grant ended, it releases that
	// fence (ending a revoked grant early; a no-op otherwise).
	releaseEndedChance = 0.5
	// lateReleaseChance: it releases an older fence it held once a newer
	// grant of the lease exists, which must change nothing.
	lateReleaseChance = 0.03
)

// sessionState is what a renewal Holder process keeps beside its process:
// the gate its Session's requests pass (closed while the process is
// paused: a paused process does not renew either), the fences it held (for
// late releases), and what its Session logged about its releases.
type sessionState struct {
	gate     sync.RWMutex
	held     []int64
	logMu    sync.Mutex
	released map[int64]string // fence -> ReleaseReleased or ReleaseNoop, from the Session's log
}

// runSession is the workload of a pod of a renewal Holder lease: it learns
// holdership from a fence.Session acting as the pod (with its bound token),
// checks Valid before every write, writes with the grant's fence, releases
// at times, and pauses as a whole process (the Session included) at times.
// It loops until the run stops or the pod is gone.
func (p *process) runSession(token string) {
	ctx, cancel := context.WithCancel(p.w.ctx)
	defer cancel()
	go func() {
		select {
		case <-p.w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	p.ss = &sessionState{released: map[int64]string{}}
	s := p.newSession(ctx, token)
	if s == nil {
		return
	}
	defer func() { _ = s.Close() }()
	for ctx.Err() == nil {
		if _, ok := s.Current(); ok {
			p.hold(ctx, s)
			continue
		}
		wctx, wcancel := context.WithTimeout(ctx, pollEvery)
		_, err := s.WaitHolder(wctx)
		wcancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		if p.gone(ctx) {
			return
		}
		switch r := p.rng.Float64(); {
		case r < impostorChance:
			p.impostor(ctx)
		case r < impostorChance+lateReleaseChance:
			p.lateRelease(ctx, s, fence.Grant{})
		}
	}
}

// newSession starts the pod's Session, retrying until the Lease exists (the
// operator creates it) or the pod is gone.
func (p *process) newSession(ctx context.Context, token string) *fence.Session {
	server := p.w.cp.podConfig(p.name)
	api := &fence.APIConfig{Host: server.Host, CAData: server.CAData, Token: func() (string, error) {
		// A paused process sends nothing: its requests wait here.
		p.ss.gate.RLock()
		defer p.ss.gate.RUnlock()
		return token, nil
	}}
	for ctx.Err() == nil {
		s, err := fence.NewSession(ctx, fence.SessionConfig{API: api, Namespace: p.w.ns, Lease: p.lease.Name, Logf: p.sessionLog})
		if err == nil {
			return s
		}
		if p.gone(ctx) {
			return nil
		}
		sleep(ctx, pollEvery)
	}
	return nil
}

// sessionLog keeps what the Session says about its releases (the only way
// to tell a written release from a no-op: both return nil).
func (p *process) sessionLog(format string, args ...any) {
	var outcome string
	switch {
	case strings.HasPrefix(format, "Released the grant with fence"):
		outcome = ReleaseReleased
	case strings.Contains(format, "had already ended when it was released"):
		outcome = ReleaseNoop
	default:
		return
	}
	if len(args) == 0 {
		return
	}
	if f, ok := args[0].(int64); ok {
		p.ss.logMu.Lock()
		p.ss.released[f] = outcome
		p.ss.logMu.Unlock()
	}
}

func (p *process) releaseLogged(f int64) string {
	p.ss.logMu.Lock()
	defer p.ss.logMu.Unlock()
	out := p.ss.released[f]
	delete(p.ss.released, f)
	return out
}

// gone says whether the process's pod no longer exists (its token dies with
// it).
func (p *process) gone(ctx context.Context) bool {
	pod := &corev1.Pod{}
	err := p.c.Get(ctx, client.ObjectKey{Namespace: p.w.ns, Name: p.name}, pod)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsUnauthorized(err):
		return true
	case err != nil:
		return false
	}
	return pod.UID != p.uid
}

// hold acts under one grant, from HolderContext until the process notices
// the grant ended, releases it or the run stops, and records the belief.
func (p *process) hold(ctx context.Context, s *fence.Session) {
	hctx, g, err := s.HolderContext(ctx)
	if err != nil {
		return
	}
	b := Belief{Lease: p.lease.Name, Pod: p.name, PodUID: p.uid, Fence: g.Fence, From: p.w.rec.Now()}
	p.ss.held = append(p.ss.held, g.Fence)
	deadline := g.Deadline
	// seen takes in the grant as the session shows it now: a renewal moves
	// its deadline on.
	seen := func() bool {
		cur, ok := s.Current()
		if !ok || cur.Fence != g.Fence {
			return false
		}
		if cur.Deadline.After(deadline) {
			deadline = cur.Deadline
		}
		return true
	}
	// end records the belief: it ended when the process noticed, or at the
	// deadline it last saw, whichever came first (past the deadline Valid is
	// false, whether or not the process looked).
	end := func(why string) {
		b.To, b.Why = p.w.rec.Now(), why
		if g.HolderRenews {
			if d := p.w.rec.Since(deadline); d < b.To {
				b.To, b.Why = d, why+" (deadline first)"
			}
		}
		p.w.rec.Belief(b)
	}
	for {
		ok := seen()
		switch {
		case ctx.Err() != nil:
			end("stop")
			return
		case !ok || hctx.Err() != nil:
			end("lost")
			if p.rng.Float64() < releaseEndedChance {
				p.release(ctx, s, ReleaseEnded, g.Fence)
			}
			return
		}
		switch r := p.rng.Float64(); {
		case r < releaseChance:
			// The work under the grant stops here, then the release.
			end("release")
			kind := ReleaseHeld
			if p.rng.Float64() < shortReleaseChance {
				kind = ReleaseShort
			}
			p.release(ctx, s, kind, g.Fence)
			return
		case r < releaseChance+lateReleaseChance:
			p.lateRelease(ctx, s, g)
			continue
		case p.stale && r < releaseChance+lateReleaseChance+pauseChance:
			p.pauseSession(ctx, g)
			continue // the next look says whether the grant survived
		}
		// The check right before the write.
		if !s.Valid(g) {
			continue
		}
		if !seen() {
			continue
		}
		p.write(ctx, g.Fence, SourceFresh)
		p.pace(writeEvery)
	}
}

// pauseSession pauses the whole process, its Session included: the
// Session's requests (renewals, a watch's restart) wait at the gate, its
// timers and the watch already open still run (they only end the grant
// sooner). Then, as a resumed process would before it looks again, it
// writes with the fence it had, without checking Valid.
func (p *process) pauseSession(ctx context.Context, g fence.Grant) {
	p.pauseThen(ctx, g.Fence, p.ss.gate.Lock, p.ss.gate.Unlock)
}

// release releases a grant and records the call: Release for the grant
// held (kinds ReleaseHeld and ReleaseShort), ReleaseGrant by fence for one
// that ended.
func (p *process) release(ctx context.Context, s *fence.Session, kind ReleaseKind, f int64) {
	timeout := writeTimeout
	if kind == ReleaseShort {
		// Shorter than a write's short deadline: a release is one
		// round trip to a local API server, often done in a millisecond.
		timeout = between(p.rng, 100*time.Microsecond, 5*time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	_ = p.releaseLogged(f)
	call := p.w.rec.Now()
	var err error
	if kind == ReleaseEnded {
		err = s.ReleaseGrant(rctx, f)
	} else {
		err = s.Release(rctx)
	}
	rel := Release{Pod: p.name, PodUID: p.uid, Lease: p.lease.Name, Kind: kind, Fence: f, Call: call, Return: p.w.rec.Now()}
	rel.Outcome = p.releaseLogged(f)
	switch {
	case err != nil:
		rel.Outcome, rel.Err = ReleaseUnknown, err.Error()
	case rel.Outcome == "":
		rel.Outcome = ReleaseNoop
	}
	p.w.rec.Release(rel)
}

// lateRelease releases an older fence this pod held, once the Lease has a
// newer grant (held is the grant this process holds now, if any): it must
// change nothing. The Lease is read (as the admin) before and after: the
// newer grant released under this pod's name afterwards could only be this
// release's doing, since this goroutine makes every release of the pod.
func (p *process) lateRelease(ctx context.Context, s *fence.Session, held fence.Grant) {
	before, err := p.readLease(ctx)
	if err != nil {
		return
	}
	newer := leaseFence(before)
	var old int64
	for _, f := range p.ss.held {
		if f < newer && f != held.Fence {
			old = max(old, f)
		}
	}
	if old == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	_ = p.releaseLogged(old)
	call := p.w.rec.Now()
	err = s.ReleaseGrant(rctx, old)
	rel := Release{Pod: p.name, PodUID: p.uid, Lease: p.lease.Name, Kind: ReleaseLate, Fence: old, Newer: newer, Call: call, Return: p.w.rec.Now()}
	logged := p.releaseLogged(old)
	after, aerr := p.readLease(ctx)
	switch {
	case logged == ReleaseReleased:
		rel.Outcome, rel.Err = ReleaseChanged, "the session wrote a release"
	case aerr == nil && leaseState(before) != fencingv1alpha1.LeaseStateReleased && leaseState(after) == fencingv1alpha1.LeaseStateReleased &&
		leaseFence(after) == newer && after.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] == string(p.uid):
		rel.Outcome, rel.Err = ReleaseChanged, fmt.Sprintf("the Lease went from %s to %s", describeLease(before), describeLease(after))
	case err != nil:
		rel.Outcome, rel.Err = ReleaseUnknown, err.Error()
	default:
		rel.Outcome = ReleaseNoop
	}
	p.w.rec.Release(rel)
}

func (p *process) readLease(ctx context.Context) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := p.w.admin.Get(ctx, client.ObjectKey{Namespace: p.w.ns, Name: p.lease.Name}, l)
	return l, err
}

func leaseFence(l *coordinationv1.Lease) int64 {
	f := record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence])
	return f
}

func leaseState(l *coordinationv1.Lease) string {
	return l.Annotations[fencingv1alpha1.LeaseAnnotationState]
}

func describeLease(l *coordinationv1.Lease) string {
	return fmt.Sprintf("(fence %d, state %s, holder %s, resourceVersion %s)", leaseFence(l), leaseState(l),
		l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID], l.ResourceVersion)
}
