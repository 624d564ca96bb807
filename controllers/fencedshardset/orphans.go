package fencedshardset

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// The Leases of shards a set no longer has (its spec shrank, or it is
// being deleted) go in three steps, so that a shard's Lease never
// disappears while a pod is still published the shard:
//
//  1. retireOrphans revokes a committed grant (from then on the webhook
//     refuses its holder) and marks its holder and previous holders;
//  2. the pods are written: the holder loses the shard and gets a new
//     mark, before any pod gains a shard (publish, or markAndTake when the
//     set is being deleted);
//  3. deleteRetired deletes the Lease, on the version revoked.
//
// A replica whose cache still shows the shard in the set, and that grants
// it again in between, finds a revoked grant on the Lease: its grant names
// the old holder as a previous holder, which it marks before it publishes
// the shard, and the delete, on the version revoked, fails. Deleted before
// the pods were written, the Lease would take that record with it: such a
// replica then granted the shard on a new Lease to another pod while the
// old holder was still published it (the simulation's seed 169 of the
// shard runs: two pods published one shard at once). A shard the set has
// again later gets a new Lease, whose fence is above every fence the old
// one had.

// retireOrphans readies the orphan Leases for deletion after the pods
// were written, and names the pods to mark. Under Safe a shrunk set's
// revoked shard waits a lease duration first (retire).
func (r *Reconciler) retireOrphans(ctx context.Context, s *scope) error {
	if s.marks == nil {
		s.marks = map[string]string{}
	}
	var errs []error
	for _, l := range s.orphans {
		l, ready, err := r.retire(ctx, s, l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ready {
			continue
		}
		s.retired = append(s.retired, l)
		if rec := record.ParseLease(l.Annotations); rec.HolderUID != "" {
			s.marks[ptr.Deref(l.Spec.HolderIdentity, "")] = rec.HolderUID
		}
		for _, h := range record.PreviousHolders(l.Annotations) {
			s.marks[h.Name] = h.UID
		}
	}
	return kerrors.NewAggregate(errs)
}

// retire revokes an orphan's committed grant, and says whether its Lease
// may be deleted once the pods were written: at once when the set is being
// deleted or is Immediate; under Safe once the revocation is a lease
// duration old, counted as a move's wait is (revocations), so that a shard
// added back, or brought back by a replica that has not seen the shrink,
// is granted to anyone only after the wait. The reconcile comes back when
// the wait is over.
func (r *Reconciler) retire(ctx context.Context, s *scope, l *coordinationv1.Lease) (*coordinationv1.Lease, bool, error) {
	safe := s.set.DeletionTimestamp.IsZero() && s.set.Spec.Takeover != fencingv1alpha1.TakeoverImmediate
	var since time.Time
	switch record.ParseLease(l.Annotations).State {
	case record.StateHeld:
		revoked, err := r.revoke(ctx, s, l)
		if err != nil {
			return nil, false, fmt.Errorf("revoke the grant of a shard FencedShardSet %s no longer has: %w", client.ObjectKeyFromObject(s.set), err)
		}
		if !safe {
			return revoked, true, nil
		}
		since = r.Clock.Now()
	case record.StateRevoked:
		if !safe {
			return l, true, nil
		}
		since = r.revoked.since(l, s.leasesRead)
	default:
		return l, true, nil
	}
	until := since.Add(leaseDuration(s.set))
	if !until.After(s.now) {
		return l, true, nil
	}
	if s.wait.IsZero() || until.Before(s.wait) {
		s.wait = until
	}
	return l, false, nil
}

// deleteRetired deletes the retired Leases, each on the version retired:
// a Lease written since stays for the next reconcile to judge.
func (r *Reconciler) deleteRetired(ctx context.Context, s *scope) error {
	var errs []error
	for _, l := range s.retired {
		pre := client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}
		if err := r.Delete(ctx, l, pre); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Lease %s of a shard FencedShardSet %s no longer has: %w",
				client.ObjectKeyFromObject(l), client.ObjectKeyFromObject(s.set), err))
			continue
		}
		r.revoked.forget(l)
	}
	return kerrors.NewAggregate(errs)
}
