package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlease/fencedlease/internal/record"
)

// DefaultMargin is how long before its grant would expire on the operator's
// clock a holder stops acting on its own: it covers a difference in the rate
// of the two machines' clocks and a late wake-up of the holder's timer. It is
// capped at a quarter of the lease duration.
const DefaultMargin = time.Second

// Grant is a grant of the lease that this pod holds.
type Grant struct {
	// Lease is the name of the FencedLease (and of its Lease).
	Lease string
	// Fence is the fencing token of the grant.
	Fence int64
	// HolderRenews says that the grant is renewed by this pod (renewal
	// Holder); otherwise the operator renews it.
	HolderRenews bool
	// Deadline is when this pod stops being the holder unless it renews
	// again first: the send time of its last successful renewal plus the
	// lease duration, minus the margin, on this process's monotonic clock.
	// Zero when the operator renews the grant.
	Deadline time.Time
	// Renewed is the send time of its last successful renewal, and
	// RenewInterval how long after it the next renewal falls due: a renewal
	// on time moves Deadline on by then. Zero when the operator renews the
	// grant.
	Renewed       time.Time
	RenewInterval time.Duration
}

// SessionConfig configures a Session.
type SessionConfig struct {
	// API reaches the API server; InClusterAPI() when nil.
	API *APIConfig
	// Namespace and Lease name the Lease of the FencedLease: the pod's
	// namespace (InClusterNamespace() when empty) and the FencedLease's
	// name (the lease token file).
	Namespace string
	Lease     string
	// Margin: see DefaultMargin.
	Margin time.Duration
	// ReleaseOnCancel releases the grant that HolderContext returned when
	// the context given to HolderContext is cancelled while this pod still
	// holds it, so that the next candidate is granted at once. As with
	// client-go's ReleaseOnCancel, cancelling that context says that the
	// work under the grant has stopped: cancel it only then.
	ReleaseOnCancel bool
	// Logf, if set, receives what the session does, for a log.
	Logf func(format string, args ...any)
}

// Session is this pod's side of a FencedLease: it follows the Lease through
// the API server (one object, watched) and learns its grants and their end
// at once, without waiting for the kubelet to rewrite the token files.
//
// With renewal Holder it renews its own grants (a compare-and-swap update of
// renewTime, with the pod's own bound token) every renew interval, and it
// holds a grant only from its first successful renewal until the send time of
// its last successful renewal plus the lease duration, minus the margin, on
// its own monotonic clock: when that passes without a newer successful
// renewal (the API server unreachable, the process paused, the renewal
// rejected), the grant is over for this pod, whatever the Lease or the files
// say. The operator judges expiry from renewals it observed, which it can only
// observe after they were sent, so with takeover Safe this pod has stopped by
// its own clock before anyone else is granted.
//
// With renewal Operator the operator renews; the session holds a grant while
// the Lease names this pod.
type Session struct {
	api             *apiClient
	namespace, name string
	podName, podUID string
	margin          time.Duration
	releaseOnCancel bool
	logf            func(string, ...any)
	done            chan struct{}
	stop            context.CancelFunc
	wg              sync.WaitGroup
	mu              sync.Mutex
	lease           *lease // the newest version seen
	grant           *Grant // the grant held now, or nil
	lastSend        time.Time
	lost            error // why the last grant ended
	changed         chan struct{}
	renewNow        bool
	// endedUpTo is the highest fence whose grant ended for this pod: a
	// grant that ended (expired, rejected, released, moved on) is never held
	// again; only a new grant, with a higher fence, is.
	endedUpTo int64
	// lastDeadline is the deadline of the last renewal of the grant with
	// fence deadlineFence: it outlives the grant, for Deadline.
	lastDeadline  time.Time
	deadlineFence int64
}

// NewSession asks the API server which pod it is (its token must be bound to
// the pod: the projected service-account token of a pod is), reads the Lease
// and starts following and renewing it. The pod's service account needs get,
// watch and update on the Lease.
func NewSession(ctx context.Context, cfg SessionConfig) (*Session, error) {
	if cfg.Lease == "" {
		return nil, errors.New("session: no FencedLease name")
	}
	if cfg.API == nil {
		api, err := InClusterAPI()
		if err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
		cfg.API = api
	}
	if cfg.Namespace == "" {
		ns, err := InClusterNamespace()
		if err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
		cfg.Namespace = ns
	}
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	api, err := newAPIClient(*cfg.API)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	name, uid, err := api.whoAmI(ctx)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	l, err := api.getLease(ctx, cfg.Namespace, cfg.Lease)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	s := &Session{api: api, namespace: cfg.Namespace, name: cfg.Lease, podName: name, podUID: uid, margin: cfg.Margin,
		releaseOnCancel: cfg.ReleaseOnCancel, logf: cfg.Logf, done: make(chan struct{}), stop: stop, changed: make(chan struct{})}
	s.see(l)
	s.wg.Add(2)
	go s.watch(rctx)
	go s.renew(rctx)
	return s, nil
}

// Pod is the name of the pod the session acts as.
func (s *Session) Pod() string { return s.podName }

// Renewal is who renews the grants of the Lease, as the session last saw
// it: "Holder" (spec.renewal Holder: the holder pod, through its Session),
// "Operator", or "" while the Lease records no grant yet (the operator
// records the mode with each grant). A program that must stop on its own
// clock, such as a fenced controller manager, can refuse "Operator" before
// it acts: a pod cannot know when an Operator grant ends.
func (s *Session) Renewal() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return ""
	}
	return record.ParseLease(s.lease.Metadata.Annotations).Renewal
}

// Close stops following and renewing. A grant held is not released (see
// Release): it expires.
func (s *Session) Close() error {
	select {
	case <-s.done:
	default:
		close(s.done)
		s.stop()
		s.wg.Wait()
		s.mu.Lock()
		s.end(fmt.Errorf("%w: the session was closed", ErrClosed))
		s.mu.Unlock()
	}
	return nil
}

// Current returns the grant this pod holds now. It checks the deadline
// against the clock itself, so it is right even when the process was paused
// and its timers have not fired yet: call it (or Valid) right before every
// side effect.
func (s *Session) Current() (Grant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grant == nil || !s.alive(*s.grant) {
		return Grant{}, false
	}
	return *s.grant, true
}

// Deadline returns when this pod's own validity of the grant with that fence
// ends, with holder renewal: the deadline of its last successful renewal of
// it, which moves on with every renewal and stays where it is once the
// grant ended (revoked, moved on, released). Whatever works under the grant
// must have stopped by then: with takeover Safe another pod may be granted
// soon after. ok is false when the operator renews the grant (this pod then
// learns of its end only afterwards), or when this session never renewed it.
func (s *Session) Deadline(fence int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= 0 || fence != s.deadlineFence {
		return time.Time{}, false
	}
	return s.lastDeadline, true
}

// Changed returns a channel that is closed at the next change of what the
// session knows: a new version of the Lease, a renewal, a grant held or
// ended. Call it again after each change.
func (s *Session) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Valid says whether g is still the grant this pod holds, now.
func (s *Session) Valid(g Grant) bool {
	cur, ok := s.Current()
	return ok && cur.Fence == g.Fence
}

// alive says whether a held grant is still within its deadline.
func (s *Session) alive(g Grant) bool {
	return !g.HolderRenews || time.Now().Before(g.Deadline)
}

// WaitHolder blocks until this pod holds a grant (with renewal Holder: until
// its first own renewal of it succeeded) and returns it.
func (s *Session) WaitHolder(ctx context.Context) (Grant, error) {
	for {
		if g, ok := s.Current(); ok {
			return g, nil
		}
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return Grant{}, fmt.Errorf("wait for holdership: %w", context.Cause(ctx))
		case <-s.done:
			return Grant{}, fmt.Errorf("wait for holdership: %w", ErrClosed)
		}
	}
}

// HolderContext waits like WaitHolder, then returns a context derived from
// ctx that is cancelled as soon as the grant ends for this pod: its deadline
// passed without a newer successful renewal, the Lease moved to another
// grant or was revoked, a renewal was rejected, or the session closed.
// context.Cause wraps ErrLost or ErrClosed and says why.
func (s *Session) HolderContext(ctx context.Context) (context.Context, Grant, error) {
	g, err := s.WaitHolder(ctx)
	if err != nil {
		return nil, Grant{}, err
	}
	hctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			s.mu.Lock()
			cur, changed, lost := s.grant, s.changed, s.lost
			s.mu.Unlock()
			if cur == nil || cur.Fence != g.Fence {
				if lost == nil {
					lost = fmt.Errorf("%w: the grant with fence %d ended", ErrLost, g.Fence)
				}
				cancel(lost)
				return
			}
			wait := time.Duration(-1)
			if cur.HolderRenews {
				wait = max(time.Until(cur.Deadline), time.Nanosecond)
			}
			if waitFor(hctx, changed, wait) {
				s.mu.Lock()
				s.expire()
				s.mu.Unlock()
			}
			if hctx.Err() != nil {
				if ctx.Err() != nil && s.releaseOnCancel {
					s.releaseCancelled(g)
				}
				return
			}
		}
	}()
	return hctx, g, nil
}

// releaseCancelled releases g after its holder's context was cancelled
// (ReleaseOnCancel), if this pod still holds it.
func (s *Session) releaseCancelled(g Grant) {
	s.mu.Lock()
	held := s.grant != nil && s.grant.Fence == g.Fence
	s.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.ReleaseGrant(ctx, g.Fence); err != nil {
		s.logf("%v", err)
	}
}

// Release ends the grant this pod holds: it stops holding it at once, then
// tells the operator with a compare-and-swap on the version of the Lease
// that holds the grant, so that the next candidate is granted without waiting
// for the grant to expire. Call it only once the work under the grant has
// stopped. A release of a grant that already ended changes nothing. When the
// outcome is unknown (a timeout) it is not retried: the grant simply expires.
func (s *Session) Release(ctx context.Context) error {
	s.mu.Lock()
	g := s.grant
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	return s.ReleaseGrant(ctx, g.Fence)
}

// ReleaseGrant releases this pod's grant with that fence, as Release does,
// and also after the operator revoked it (a pod being deleted is revoked at
// once): a revoked grant runs until it expires, and under Safe takeover
// nobody else is granted before that, unless its holder says that its work
// has stopped. It changes nothing when the Lease has moved on to another
// grant: a late release never ends a newer grant. Call it only once the
// work under that grant has stopped.
func (s *Session) ReleaseGrant(ctx context.Context, fence int64) error {
	s.mu.Lock()
	if s.grant != nil && s.grant.Fence == fence {
		s.end(fmt.Errorf("%w: the grant with fence %d was released by this pod", ErrLost, fence))
	}
	l := s.lease
	s.mu.Unlock()
	// A conflict means the Lease changed since this session last saw it:
	// often the operator revoking the very grant (a pod being deleted). Read
	// it again and release it if it is still this pod's grant.
	for range 3 {
		if fence <= 0 || !s.releasable(l) || parseFence(l) != fence {
			return nil
		}
		updated, err := s.api.updateLease(ctx, l, "", map[string]string{record.LeaseState: record.StateReleased})
		switch {
		case isConflict(err):
			fresh, gerr := s.api.getLease(ctx, s.namespace, s.name)
			if gerr != nil {
				return fmt.Errorf("release the grant with fence %d (it will expire instead): read the Lease: %w", fence, gerr)
			}
			s.mu.Lock()
			s.see(fresh)
			s.mu.Unlock()
			l = fresh
			continue
		case err != nil:
			return fmt.Errorf("release the grant with fence %d (it will expire instead): %w", fence, err)
		}
		s.logf("Released the grant with fence %d", fence)
		s.mu.Lock()
		s.see(updated)
		s.mu.Unlock()
		return nil
	}
	s.logf("The grant with fence %d kept changing while it was released: it will expire instead", fence)
	return nil
}

// releasable says whether a version of the Lease names this pod in a grant
// it may release: held, or revoked and not yet superseded.
func (s *Session) releasable(l *lease) bool {
	if l == nil {
		return false
	}
	r := record.ParseLease(l.Metadata.Annotations)
	return r.HolderUID == s.podUID && (r.State == record.StateHeld || r.State == record.StateRevoked)
}

// holds says whether a version of the Lease names this pod in a held grant.
func (s *Session) holds(l *lease) bool {
	return l != nil && record.ParseLease(l.Metadata.Annotations).Holds(s.podUID)
}

// parseFence is the fence of the last grant a version of the Lease committed.
func parseFence(l *lease) int64 { return record.ParseLease(l.Metadata.Annotations).Fence }

func holderRenews(l *lease) bool { return record.ParseLease(l.Metadata.Annotations).HolderRenews() }

func leaseDuration(l *lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return 15 * time.Second
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

func renewInterval(l *lease) time.Duration {
	if n := record.ParseLease(l.Metadata.Annotations).RenewInterval; n > 0 {
		return time.Duration(n) * time.Second
	}
	return leaseDuration(l) / 3
}

// see takes in a newer version of the Lease; s.mu must be held.
func (s *Session) see(l *lease) {
	if s.lease != nil && !record.MaybeNewer(l.Metadata.ResourceVersion, s.lease.Metadata.ResourceVersion) {
		return
	}
	s.lease = l
	switch {
	case s.grant != nil && (!s.holds(l) || parseFence(l) != s.grant.Fence):
		s.end(fmt.Errorf("%w: the Lease moved from the grant with fence %d (state %q, fence %q)", ErrLost, s.grant.Fence,
			l.Metadata.Annotations[record.LeaseState], l.Metadata.Annotations[record.AnnotationFence]))
	case s.grant == nil && s.holds(l) && !holderRenews(l) && parseFence(l) > s.endedUpTo:
		// Renewed by the operator: held while the Lease names this pod.
		s.grant = &Grant{Lease: s.name, Fence: parseFence(l)}
		s.lost = nil
		s.logf("Holding the grant with fence %d (renewed by the operator)", s.grant.Fence)
	case s.grant == nil && s.holds(l) && holderRenews(l) && parseFence(l) > s.endedUpTo:
		s.renewNow = true // a grant to renew: its first own renewal, now
	}
	s.notify()
}

// end ends the grant held, if any; s.mu must be held.
func (s *Session) end(why error) {
	if s.grant == nil {
		return
	}
	s.logf("No longer holding the grant with fence %d: %v", s.grant.Fence, why)
	s.endedUpTo = max(s.endedUpTo, s.grant.Fence)
	s.grant, s.lost = nil, why
	s.notify()
}

// expire ends the grant if its deadline passed; s.mu must be held.
func (s *Session) expire() {
	if s.grant != nil && !s.alive(*s.grant) {
		s.end(fmt.Errorf("%w: no successful renewal of the grant with fence %d within the lease duration (deadline %s ago)",
			ErrLost, s.grant.Fence, time.Since(s.grant.Deadline).Round(time.Millisecond)))
	}
}

func (s *Session) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch follows the Lease: a watch from the version last seen, bounded in
// time, then a fresh read and a new watch from the version read, again and
// again; a pause after an error. A watch can stay open and deliver nothing
// (a proxy or a half-dead connection between the pod and the API server
// keeps it, no error comes): the API server ends every watch after
// watchPeriod, and the session gives up on one that has not ended
// watchGrace later, so that its view of the Lease is never older than about
// a watch period while the API server answers reads.
func (s *Session) watch(ctx context.Context) {
	defer s.wg.Done()
	read := false // the first watch starts from the version NewSession read
	for ctx.Err() == nil {
		if read {
			l, err := s.api.getLease(ctx, s.namespace, s.name)
			if err != nil {
				if ctx.Err() == nil {
					s.logf("Reading Lease %s/%s: %v", s.namespace, s.name, err)
				}
				sleep(ctx, 500*time.Millisecond)
				continue
			}
			s.mu.Lock()
			s.see(l)
			s.mu.Unlock()
		}
		read = true
		s.mu.Lock()
		rv, period := s.lease.Metadata.ResourceVersion, watchPeriod(s.lease)
		s.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, period+watchGrace)
		err := s.api.watchLease(wctx, s.namespace, s.name, rv, period, func(eventType string, l *lease) {
			if eventType == "BOOKMARK" {
				return // a bookmark carries a resourceVersion, not the Lease
			}
			s.mu.Lock()
			s.see(l)
			s.mu.Unlock()
		})
		silent := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case silent:
			s.logf("The watch of Lease %s/%s did not end within %s of its %s timeout: reading the Lease again", s.namespace, s.name, watchGrace, period)
		case err != nil && !isGone(err):
			s.logf("Watching Lease %s/%s: %v", s.namespace, s.name, err)
			sleep(ctx, 500*time.Millisecond)
		}
	}
}

// watchGrace is how long after its timeout a watch that has not ended is
// given up: the API server ends it at the timeout.
const watchGrace = 2 * time.Second

// watchPeriod is the timeout of each watch of the Lease: its lease
// duration, between 5 seconds and a minute. Each watch costs a read of the
// Lease when it ends; a shorter period would bound a silent watch more
// tightly at more reads.
func watchPeriod(l *lease) time.Duration {
	return min(max(leaseDuration(l), 5*time.Second), time.Minute)
}

// renew renews this pod's grant with renewal Holder: at once when a new
// grant names it, then every renew interval, and again at once after a
// conflict (the Lease changed: re-read, and renew if it still holds).
func (s *Session) renew(ctx context.Context) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		s.mu.Lock()
		s.expire()
		l, changed := s.lease, s.changed
		var wait time.Duration
		switch {
		case !s.holds(l) || !holderRenews(l) || parseFence(l) <= s.endedUpTo:
			wait = -1 // nothing to renew: wait for a change
		case s.renewNow || s.grant == nil || s.grant.Fence != parseFence(l):
			wait = 0
		default:
			wait = time.Until(s.lastSend.Add(renewInterval(l)))
		}
		s.renewNow = false
		s.mu.Unlock()
		if wait != 0 && !waitFor(ctx, changed, wait) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		s.renewOnce(ctx, l)
	}
}

// renewOnce makes one renewal of the grant on version l of the Lease.
func (s *Session) renewOnce(ctx context.Context, l *lease) {
	fence := parseFence(l)
	if fence == 0 {
		return
	}
	// Timers fire late after a pause: look at the deadline again right
	// before sending. A renewal of a grant that already ended would be
	// accepted while the operator has not ended it yet, and make the
	// operator wait a further lease duration for a holder that stopped.
	s.mu.Lock()
	s.expire()
	ended := fence <= s.endedUpTo
	s.mu.Unlock()
	if ended {
		return
	}
	sent := time.Now()
	updated, err := s.api.updateLease(ctx, l, sent.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case fence <= s.endedUpTo:
		// The grant ended while the renewal was on its way (released,
		// expired): it stays ended. The Lease version it wrote is still
		// the one a release must be made on.
		if err == nil {
			s.see(updated)
		}
	case err == nil:
		first := s.grant == nil || s.grant.Fence != fence
		s.lastSend = sent
		margin := min(s.margin, leaseDuration(l)/4)
		s.grant = &Grant{Lease: s.name, Fence: fence, HolderRenews: true, Deadline: sent.Add(leaseDuration(l) - margin),
			Renewed: sent, RenewInterval: renewInterval(l)}
		s.lastDeadline, s.deadlineFence = s.grant.Deadline, fence
		s.lost = nil
		if first {
			s.logf("Holding the grant with fence %d after its first renewal", fence)
		}
		s.see(updated)
		s.notify()
	case isConflict(err):
		// The Lease changed under us: the watch brings the new version; if
		// the grant is still ours, renew it right away.
		s.renewNow = true
		if fresh, gerr := s.api.getLease(ctx, s.namespace, s.name); gerr == nil {
			s.see(fresh)
		}
	default:
		var ae *apiError
		if errors.As(err, &ae) && (ae.Code == 403 || ae.Code == 401) {
			s.end(fmt.Errorf("%w: the renewal was rejected: %w", ErrLost, err))
		}
		s.logf("Renewing the grant with fence %d: %v", fence, err)
		s.mu.Unlock()
		sleep(ctx, 200*time.Millisecond)
		s.mu.Lock()
		s.renewNow = true
	}
}

// waitFor waits until changed is closed (false), d passes (true; d < 0
// waits for the change only) or ctx ends (false).
func waitFor(ctx context.Context, changed <-chan struct{}, d time.Duration) bool {
	var timer <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-changed:
		return false
	case <-timer:
		return true
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
