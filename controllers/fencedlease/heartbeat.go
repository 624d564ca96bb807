package fencedlease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/fencedlease/fencedlease/internal/record"
)

// Heartbeat is the operator's heartbeat: one Lease, renewed by every
// process of the operator that reconciles, that vouches for every grant of
// renewal Operator it names (design.md, "A quiet lease"). A quiet grant then
// costs no write of its own but one every Refresh.
type Heartbeat struct {
	// Namespace and Name of the heartbeat Lease: the operator's namespace.
	Namespace, Name string
	// Interval is how often it is renewed. A FencedLease whose lease
	// duration is shorter than four intervals is renewed on its own Lease,
	// as without a heartbeat.
	Interval time.Duration
	// Refresh is how often the Lease of a vouched grant is written all the
	// same, so that its renewTime says the grant is alive to anyone who
	// reads the Lease alone.
	Refresh time.Duration
	// Identity is the process, written as the heartbeat's holderIdentity
	// (it says which process renewed it last, nothing more).
	Identity string
}

// Default timing of the heartbeat.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatRefresh  = 5 * time.Minute
	DefaultHeartbeatName     = "fencedlease-heartbeat"
)

func (h *Heartbeat) key() types.NamespacedName {
	return types.NamespacedName{Namespace: h.Namespace, Name: h.Name}
}

// voucher is how a vouched grant names the heartbeat.
func (h *Heartbeat) voucher() string { return h.Namespace + "/" + h.Name }

// vouchesFor says whether the heartbeat vouches for grants of a lease
// duration: one that lasts at least four of its intervals.
func (h *Heartbeat) vouchesFor(leaseDuration time.Duration) bool {
	return h != nil && h.Interval > 0 && h.Refresh > 0 && leaseDuration >= 4*h.Interval
}

// beatSeen is what this process saw of the heartbeat on its own monotonic
// clock: the newest version, its count of renewals, and when it last saw
// it change (a renewal confirmed, by this process or another).
type beatSeen struct {
	rv        string
	beats     int64
	changedAt time.Time
	// ahead is, once the store was found to have gone back in time
	// (sawLiveBeat), the newest version seen before: a cached version not
	// above it is from the past the store lost, or older still.
	ahead string
}

func beatsOf(l *coordinationv1.Lease) int64 { return record.BeatsOf(l.Annotations) }

// sawBeat records a version of the heartbeat as seen now: a newer version
// is a renewal confirmed now; the first one seen counts as one too, as an
// unknown grant counts as freshly renewed (clock.go).
func (m *memories) sawBeat(l *coordinationv1.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.beat.rv != "" && !record.Newer(l.ResourceVersion, m.beat.rv) {
		return
	}
	m.beat = beatSeen{rv: l.ResourceVersion, beats: beatsOf(l), changedAt: m.clock.Now(), ahead: m.beat.ahead}
}

// unhealthyAfter is how many intervals without a renewal seen make the
// heartbeat unfit to vouch for more: its grants are renewed on their own
// Leases until it is renewed again.
const unhealthyAfter = 3

// beatHealthy says whether this process saw the heartbeat renewed within
// the last unhealthyAfter intervals.
func (m *memories) beatHealthy(now time.Time, interval time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.beat.changedAt.IsZero() && now.Sub(m.beat.changedAt) < unhealthyAfter*interval
}

// lastBeat is when this process last saw the heartbeat renewed; zero when
// it has not seen it yet.
func (m *memories) lastBeat() beatSeen {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.beat
}

// Beat renews the heartbeat once, creating it if it is missing, and
// records the renewal when the API server confirms it. A conflict (another
// process renewed it meanwhile) is looked at again once, on the API
// server's version.
func (r *Reconciler) Beat(ctx context.Context) error {
	r.once.Do(r.defaults)
	h := r.Heartbeat
	if h == nil {
		return nil
	}
	l, err := r.readBeat(ctx)
	for try := 0; ; try++ {
		switch {
		case apierrors.IsNotFound(err):
			// Missing, or deleted since the cache saw it: created anew.
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: h.Name}}
			next := r.beatWrite(l)
			if err = r.Create(ctx, next); err == nil {
				return r.beaten(next)
			}
			if !apierrors.IsAlreadyExists(err) || try > 0 {
				heartbeatFailuresTotal.Inc()
				return fmt.Errorf("create heartbeat Lease %s: %w", h.key(), err)
			}
		case err != nil:
			heartbeatFailuresTotal.Inc()
			return err
		default:
			next := r.beatWrite(l.DeepCopy())
			if err = r.Update(ctx, next); err == nil {
				return r.beaten(next)
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) || try > 0 {
				heartbeatFailuresTotal.Inc()
				return fmt.Errorf("renew heartbeat Lease %s: %w", klog.KObj(l), err)
			}
		}
		l, err = r.readLiveBeat(ctx)
	}
}

// beaten records a renewal of the heartbeat the API server confirmed.
func (r *Reconciler) beaten(l *coordinationv1.Lease) error {
	r.mem.sawBeat(l)
	heartbeatsTotal.Inc()
	return nil
}

// readBeat reads the heartbeat from the cache, or from the API server when
// the cached version is from a past the store lost (sawLiveBeat).
func (r *Reconciler) readBeat(ctx context.Context) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, r.Heartbeat.key(), l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("read heartbeat Lease %s: %w", r.Heartbeat.key(), err)
	}
	if r.mem.beatFromLostPast(l) {
		return r.readLiveBeat(ctx)
	}
	r.mem.sawBeat(l)
	return l, nil
}

// readLiveBeat reads the heartbeat from the API server.
func (r *Reconciler) readLiveBeat(ctx context.Context) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, r.Heartbeat.key(), l); err != nil {
		return nil, fmt.Errorf("read heartbeat Lease %s: %w", r.Heartbeat.key(), err)
	}
	r.sawLiveBeat(ctx, l)
	return l, nil
}

// beatWrite is the next version of the heartbeat: one more renewal, now,
// by this process. Its duration is what a reader of it alone would take it
// for: four intervals.
func (r *Reconciler) beatWrite(l *coordinationv1.Lease) *coordinationv1.Lease {
	h := r.Heartbeat
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	record.WriteBeats(l.Labels, l.Annotations, beatsOf(l)+1)
	now := metav1.NewMicroTime(r.Clock.Now())
	l.Spec.HolderIdentity = ptr.To(h.Identity)
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr.To(int32(max(4*h.Interval/time.Second, 1)))
	return l
}

// lookAtBeat reads the heartbeat from the cache and records it as seen,
// unless it is from a past the store lost (sawLiveBeat).
func (r *Reconciler) lookAtBeat(ctx context.Context) {
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, r.Heartbeat.key(), l); err == nil && !r.mem.beatFromLostPast(l) {
		r.mem.sawBeat(l)
	}
}

// creditAfterEnd is, for a vouched grant that has ended (revoked or
// released, as of the Lease version ended), the latest time at which the
// heartbeat may have renewed it: a renewal of the heartbeat written before
// the end counts, one after it does not. This process may not have seen
// every renewal before the end yet (the heartbeat and the Lease are two
// watches), so it reads the heartbeat from the API server: when the only
// renewals it missed came after the end, the last one it saw counts; when
// one it missed may have come before, the time of this read does, which is
// later than any of them.
func (r *Reconciler) creditAfterEnd(ctx context.Context, ended string) (time.Time, error) {
	seen := r.mem.lastBeat()
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, r.Heartbeat.key(), live); err != nil {
		if apierrors.IsNotFound(err) && seen.rv == "" {
			return time.Time{}, nil // never renewed: it vouched for nothing
		}
		return time.Time{}, fmt.Errorf("read heartbeat Lease %s: %w", r.Heartbeat.key(), err)
	}
	now := r.Clock.Now()
	credit := seen.changedAt
	switch missed := beatsOf(live) - seen.beats; {
	case seen.rv == "" || missed < 0:
		credit = now
	case live.ResourceVersion == seen.rv || missed == 0:
	case missed == 1 && record.Newer(live.ResourceVersion, ended):
		// The one renewal missed came after the end.
	default:
		credit = now
	}
	r.sawLiveBeat(ctx, live)
	return credit, nil
}
