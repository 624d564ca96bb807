package fencedlease

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// heartbeatRunner renews the heartbeat every interval and, after each
// renewal, watches it: a FencedLease whose grant the heartbeat vouches for
// is looked at again once the heartbeat has gone a few intervals without a
// renewal this process saw (its own failing, or another process's not
// reaching this one), to be renewed on its own Lease until the heartbeat
// is renewed again. A vouched grant otherwise waits for its refresh, with
// nothing to look at in between: the heartbeat keeps it.
type heartbeatRunner struct {
	r    *Reconciler
	wake chan<- event.TypedGenericEvent[*fencingv1alpha1.FencedLease]
}

// NeedLeaderElection: the heartbeat runs where the controller runs.
func (h *heartbeatRunner) NeedLeaderElection() bool { return true }

// Start renews until ctx ends.
func (h *heartbeatRunner) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("heartbeat")
	interval := h.r.Heartbeat.Interval
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	var renewed time.Time
	for {
		beatCtx, cancel := context.WithTimeout(ctx, 4*interval)
		err := h.r.Beat(beatCtx)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			log.Info("The heartbeat was not renewed; grants it vouches for expire a lease duration after its last renewal", "err", err.Error())
			failing = true
		case err == nil && failing:
			log.Info("The heartbeat is renewed again")
			failing = false
		}
		h.r.lookAtBeat(ctx)
		if b := h.r.mem.lastBeat(); b.changedAt.After(renewed) {
			// A renewal of the heartbeat is one of every grant it vouches
			// for, as the metric of their last renewal shows.
			renewed = b.changedAt
			h.r.mem.renewedVouched(unixSeconds(time.Now()))
		}
		wake := append(h.r.mem.takeWentBack(), h.r.mem.unvouched(h.r.Clock.Now(), unhealthyAfter*interval)...)
		for _, key := range wake {
			fl := &fencingv1alpha1.FencedLease{}
			fl.Namespace, fl.Name = key.Namespace, key.Name
			select {
			case h.wake <- event.TypedGenericEvent[*fencingv1alpha1.FencedLease]{Object: fl}:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// renewedVouched records a renewal, at unix time at, in the series of every
// FencedLease whose held grant the heartbeat vouches for.
func (m *memories) renewedVouched(at float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key := range m.vouched {
		if tr := m.tracks[key]; tr != nil {
			tr.series.lastRenewal = at
		}
	}
}

// unvouched are the FencedLeases whose vouched grant the heartbeat has not
// been seen renewing for a while, as of now: for unhealthy (the grants are
// then renewed on their own Leases), or for a lease duration if shorter.
func (m *memories) unvouched(now time.Time, unhealthy time.Duration) []types.NamespacedName {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []types.NamespacedName
	if m.beat.changedAt.IsZero() {
		return nil
	}
	silent := now.Sub(m.beat.changedAt)
	for key, d := range m.vouched {
		if silent >= min(d, unhealthy) {
			out = append(out, key)
		}
	}
	return out
}
