package fencedshardset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/shard"
)

// move is a shard given to a new owner in this reconcile, for the Events.
type move struct {
	key, from, to string
	was, fence    int64
}

// writeGrants writes, for every shard, the next write its plan needs
// (shard.Step), Writers at a time. Each write is a compare-and-swap on the
// shard's Lease: a replica or a reconcile that read an older Lease fails
// it, and comes back.
func (r *Reconciler) writeGrants(ctx context.Context, s *scope) error {
	var (
		mu      sync.Mutex
		errs    []error
		moves   []move
		written = map[string]*coordinationv1.Lease{}
		taken   = map[string]string{}
		wg      sync.WaitGroup
	)
	slots := make(chan struct{}, r.Writers)
	for _, key := range s.keys {
		if _, conflict := s.conflicts[key]; conflict {
			continue
		}
		l := s.leases[key]
		t := r.target(s, key)
		act, until := shard.Step(r.recordOf(l, s), t, s.set.Spec.Takeover == fencingv1alpha1.TakeoverImmediate, leaseDuration(s.set), s.now)
		if act == shard.Wait {
			if s.wait.IsZero() || until.Before(s.wait) {
				s.wait = until
			}
			continue
		}
		if act == shard.None {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			after, m, err := r.writeShard(ctx, s, key, l, t, act)
			mu.Lock()
			defer mu.Unlock()
			if after != nil {
				written[key] = after // s.leases is read by the loop: applied after it
			}
			if m != nil {
				moves = append(moves, *m)
			}
			var exists *leaseExistsError
			switch {
			case errors.As(err, &exists):
				taken[key] = exists.name // reported as a conflict, not a failure
			case err != nil:
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	maps.Copy(s.leases, written)
	maps.Copy(s.conflicts, taken)
	s.moved += len(moves)
	r.recordMoves(s, moves)
	if s.set.Spec.Takeover != fencingv1alpha1.TakeoverImmediate {
		// A shard revoked here waits out its lease before its next grant.
		for _, l := range s.leases {
			if record.ParseLease(l.Annotations).State != record.StateRevoked {
				continue
			}
			if until := r.revoked.since(l, s.leasesRead).Add(leaseDuration(s.set)); until.After(s.now) && (s.wait.IsZero() || until.Before(s.wait)) {
				s.wait = until
			}
		}
	}
	return kerrors.NewAggregate(errs)
}

// target is the pod the plan gives a shard to.
func (r *Reconciler) target(s *scope, key string) shard.Target {
	name := s.plan.Owners[key]
	c, ok := s.eligible[name]
	if !ok {
		return shard.Target{}
	}
	return shard.Target{Name: name, UID: string(c.UID)}
}

// recordOf is what a shard's Lease says of its grant. A revoked grant
// changed when this process first saw it revoked (revocations).
func (r *Reconciler) recordOf(l *coordinationv1.Lease, s *scope) shard.Record {
	if l == nil {
		return shard.Record{}
	}
	rec := record.ParseLease(l.Annotations)
	out := shard.Record{Exists: true, Holder: ptr.Deref(l.Spec.HolderIdentity, ""), HolderUID: rec.HolderUID, State: rec.State}
	if rec.State == record.StateRevoked {
		out.Changed = r.revoked.since(l, s.leasesRead)
	} else {
		r.revoked.forget(l)
	}
	return out
}

// writeShard carries out one action on a shard's Lease: a revocation, or
// a grant and its commit, or the commit of a grant written before. It
// returns the Lease as last written, and the move when a grant committed.
func (r *Reconciler) writeShard(ctx context.Context, s *scope, key string, l *coordinationv1.Lease, t shard.Target, act shard.Action) (*coordinationv1.Lease, *move, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("shard", key)
	was := record.ParseLease(nil)
	from := ""
	if l != nil {
		was, from = record.ParseLease(l.Annotations), ptr.Deref(l.Spec.HolderIdentity, "")
	}
	switch act {
	case shard.Revoke:
		after, err := r.revoke(ctx, s, l)
		if err == nil {
			log.V(1).Info("Revoked a shard's grant", "lease", klog.KObj(after), "pod", from, "fence", was.Fence)
		}
		return after, nil, err
	case shard.Grant:
		var err error
		if l, err = r.grant(ctx, s, key, l, t); err != nil {
			return nil, nil, err
		}
	}
	after, err := r.commit(ctx, l)
	if err != nil {
		return l, nil, err
	}
	fence := record.ParseLease(after.Annotations).Fence
	log.V(1).Info("Granted a shard", "lease", klog.KObj(after), "pod", t.Name, "fence", fence, "from", from, "was", was.Fence)
	if was.Fence == 0 {
		from = "" // never committed to anyone before
	}
	return after, &move{key: key, from: from, to: t.Name, was: was.Fence, fence: fence}, nil
}

// grant writes a pending grant of the shard to t: its resourceVersion is
// the fence the commit records. The Lease is created with the grant when
// the shard has none.
func (r *Reconciler) grant(ctx context.Context, s *scope, key string, l *coordinationv1.Lease, t shard.Target) (*coordinationv1.Lease, error) {
	now := metav1.NewMicroTime(s.now)
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: record.ShardLeaseName(s.set.Name, key), Namespace: s.set.Namespace,
			Labels:          map[string]string{record.LabelShardSet: s.set.Name, record.LabelShard: key},
			Annotations:     map[string]string{},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s.set, fencingv1alpha1.GroupVersion.WithKind("FencedShardSet"))},
		}}
		pendingGrant(l, t, now, s.set, false)
		if err := r.Create(ctx, l); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, &leaseExistsError{name: l.Name, err: err}
			}
			return nil, fmt.Errorf("create Lease %s for shard %q: %w", klog.KObj(l), key, err)
		}
		return l, nil
	}
	l = l.DeepCopy()
	pendingGrant(l, t, now, s.set, published(s, l))
	if err := r.Update(ctx, l); err != nil {
		return nil, fmt.Errorf("grant shard %q of FencedShardSet %s to pod %s on Lease %s: %w", key, klog.KObj(s.set), t.Name, l.Name, err)
	}
	return l, nil
}

// published says whether the committed grant on l was published to its
// pod, as the pods were read (before the Leases): the pod lists the shard
// with the grant's fence.
func published(s *scope, l *coordinationv1.Lease) bool {
	rec := record.ParseLease(l.Annotations)
	pod, ok := s.pods[ptr.Deref(l.Spec.HolderIdentity, "")]
	if !ok || string(pod.UID) != rec.HolderUID || rec.Fence == 0 {
		return false
	}
	shards, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
	return err == nil && shards[l.Labels[record.LabelShard]] == rec.Fence
}

// leaseExistsError: the Lease of a shard's name exists but was not among the
// set's (another replica created it a moment ago, or it is not the set's).
// The shard is left alone in this reconcile, and the set says which Lease
// is in the way when it stays.
type leaseExistsError struct {
	name string
	err  error
}

func (e *leaseExistsError) Error() string { return fmt.Sprintf("Lease %s exists: %v", e.name, e.err) }
func (e *leaseExistsError) Unwrap() error { return e.err }

// pendingGrant records a pending grant to t on a Lease: a new holder is a
// transition (acquireTime now, leaseTransitions one more); the fence of
// the last committed grant stays until the commit replaces it.
//
// The pod of a committed grant it replaces joins the Lease's previous
// holders, which are marked before the shard is published again. The
// previous holders before it are dropped only when that grant was
// published to its pod (published): the reconcile that published it
// marked them first, and a failed mark stops a publication. A grant that
// was never published leaves them to be marked still: a move whose mark
// failed, followed by another move, must not forget the first pod, whose
// publication of the first grant may still be in flight.
func pendingGrant(l *coordinationv1.Lease, t shard.Target, now metav1.MicroTime, set *fencingv1alpha1.FencedShardSet, published bool) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	rec := record.ParseLease(l.Annotations)
	prev := ptr.Deref(l.Spec.HolderIdentity, "")
	switch rec.State {
	case record.StatePending:
		// The pending grant replaced was never committed: the pods to mark
		// are still those before it.
	case record.StateHeld, record.StateRevoked:
		// The pod of the committed grant replaced (this pod too, when it is
		// granted again) is marked before the shard is published again.
		holders := []record.Holder{{Name: prev, UID: rec.HolderUID}}
		if !published {
			holders = append(record.PreviousHolders(l.Annotations), holders...)
		}
		record.SetPreviousHolders(l.Annotations, holders)
	default:
		record.SetPreviousHolders(l.Annotations, nil)
	}
	if prev != t.Name || rec.HolderUID != t.UID {
		if prev != "" {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity = ptr.To(t.Name)
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr.To(set.Spec.LeaseDurationSeconds)
	record.Lease{State: record.StatePending, HolderUID: t.UID, Fence: rec.Fence, Renewal: record.RenewalOperator}.Apply(l.Annotations)
}

// commit makes a pending grant held, with the Lease's resourceVersion as
// its fence: the version the pending write made, unless the Lease was
// written since, in which case the newer version is as good a fence (it is
// above every fence before it) and the update's precondition is on it.
func (r *Reconciler) commit(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	fence, err := record.FenceFromResourceVersion(l.ResourceVersion)
	if err != nil {
		return nil, fmt.Errorf("commit the grant on Lease %s: %w", klog.KObj(l), err)
	}
	l = l.DeepCopy()
	rec := record.ParseLease(l.Annotations)
	rec.State, rec.Fence = record.StateHeld, fence
	rec.Apply(l.Annotations)
	if err := r.Update(ctx, l); err != nil {
		return nil, fmt.Errorf("commit the grant on Lease %s with fence %d: %w", klog.KObj(l), fence, err)
	}
	return l, nil
}

// revoke ends a held grant: from this write on the fencing webhook refuses
// its holder, and under Safe the shard waits a lease duration from now.
func (r *Reconciler) revoke(ctx context.Context, s *scope, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	rec := record.ParseLease(l.Annotations)
	rec.State = record.StateRevoked
	rec.Apply(l.Annotations)
	now := metav1.NewMicroTime(s.now)
	l.Spec.RenewTime = &now
	if err := r.Update(ctx, l); err != nil {
		return nil, fmt.Errorf("revoke the grant on Lease %s: %w", klog.KObj(l), err)
	}
	// The Safe wait counts from when the write was applied, not from the
	// start of the reconcile.
	r.revoked.since(l, r.Clock.Now())
	return l, nil
}

// recordMoves tells of the moves in Events on the set: one per move with
// its fences, or one in all when many shards moved at once.
func (r *Reconciler) recordMoves(s *scope, moves []move) {
	const each = 64
	if len(moves) > each {
		r.Recorder.Eventf(s.set, nil, "Normal", fencingv1alpha1.EventShardsGranted, "Grant", "%d shards granted", len(moves))
		return
	}
	for _, m := range moves {
		if m.from == "" {
			r.Recorder.Eventf(s.set, nil, "Normal", fencingv1alpha1.EventShardsGranted, "Grant", "shard %s granted to pod %s with fence %d", m.key, m.to, m.fence)
			continue
		}
		r.Recorder.Eventf(s.set, nil, "Normal", fencingv1alpha1.EventShardMoved, "Grant", "shard %s moved from pod %s (fence %d) to pod %s with fence %d", m.key, m.from, m.was, m.to, m.fence)
	}
}
