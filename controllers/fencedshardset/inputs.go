package fencedshardset

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/shard"
)

// scope is what one reconcile of a set knows and has done.
type scope struct {
	set  *fencingv1alpha1.FencedShardSet
	base *fencingv1alpha1.FencedShardSet
	now  time.Time

	keys []string
	// pods are the pods published to or selected, by name, as read
	// before the Leases (publish relies on that order).
	pods map[string]*corev1.Pod
	// eligible are the selected pods that may own shards, by name.
	eligible map[string]holder.Candidate
	// leases are the shards' Leases by key, as the API server holds them,
	// then as this reconcile wrote them.
	leases map[string]*coordinationv1.Lease
	// leasesRead is when the Leases were read: a revoked grant first seen
	// in them was revoked by then, not by now, which may be long before
	// (revocations).
	leasesRead time.Time
	plan       shard.Plan

	// invalid, when set, is why the set cannot be acted on (Degraded).
	invalid, invalidReason string
	// conflicts are the Leases of the shards' names that the set does not
	// control; orphans the set's Leases of shards it no longer has.
	conflicts map[string]string
	orphans   []*coordinationv1.Lease
	// retired are the orphans to delete once their pods were written.
	retired []*coordinationv1.Lease
	// marks are pods to mark before any shard is published (name to UID):
	// the holders of shards whose Leases this reconcile deleted.
	marks map[string]string
	// wait is the soonest time a shard's Safe wait ends; moved counts the
	// shards granted to a new owner in this reconcile.
	wait  time.Time
	moved int
}

// result is when to come back: when a Safe wait ends, when a young pod
// may be given shards from live owners, or after a lease duration when a
// paced rebalance is not done.
func (s *scope) result() ctrl.Result {
	next := s.wait
	if !s.plan.Wait.IsZero() && (next.IsZero() || s.plan.Wait.Before(next)) {
		next = s.plan.Wait
	}
	if s.plan.Paced {
		if at := s.now.Add(leaseDuration(s.set)); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if next.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(next.Sub(s.now), 10*time.Millisecond)}
}

// Keys returns the shards of a set, in order.
func Keys(set *fencingv1alpha1.FencedShardSet) []string { return set.ShardKeys() }

// readInputs reads the pods (from the cache) and then the shards' Leases
// (from the API server), and plans the owner of every shard.
func (r *Reconciler) readInputs(ctx context.Context, s *scope) error {
	s.keys = Keys(s.set)
	sel, err := metav1.LabelSelectorAsSelector(&s.set.Spec.Selector)
	if err != nil {
		s.invalid, s.invalidReason = fmt.Sprintf("spec.selector is invalid: %v", err), fencingv1alpha1.ReasonInvalidSelector
		return nil
	}
	if err := r.readPods(ctx, s, sel); err != nil {
		return err
	}
	if err := r.readLeases(ctx, s); err != nil {
		return err
	}
	s.plan = shard.Assign(assignInput(s))
	return nil
}

// readPods reads the selected pods and those the set published to (a pod
// no longer selected must be told it owns nothing), from the cache.
func (r *Reconciler) readPods(ctx context.Context, s *scope, sel labels.Selector) error {
	s.pods, s.eligible = map[string]*corev1.Pod{}, map[string]holder.Candidate{}
	others, err := r.otherSelectors(ctx, s.set)
	if err != nil {
		return err
	}
	ns := client.InNamespace(s.set.Namespace)
	published := &corev1.PodList{}
	if err := r.List(ctx, published, ns, client.MatchingLabels{record.LabelShardSet: s.set.Name}); err != nil {
		return fmt.Errorf("list the pods FencedShardSet %s published to: %w", client.ObjectKeyFromObject(s.set), err)
	}
	for i := range published.Items {
		s.pods[published.Items[i].Name] = &published.Items[i]
	}
	selected := &corev1.PodList{}
	if err := r.List(ctx, selected, ns, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("list the candidate pods of FencedShardSet %s: %w", client.ObjectKeyFromObject(s.set), err)
	}
	for i := range selected.Items {
		p := &selected.Items[i]
		s.pods[p.Name] = p
		if c := r.candidate(ctx, p, overlaps(p, others)); c.Eligible() {
			s.eligible[p.Name] = c
		}
	}
	return nil
}

// assignInput is the assignment's input: the eligible pods, and each
// shard's owner while its grant is live (held or pending) and its owner
// is one of them.
func assignInput(s *scope) shard.Input {
	in := shard.Input{
		Shards: s.keys, Owners: map[string]string{}, Acquired: map[string]time.Time{}, Transitions: map[string]int32{},
		Now: s.now, JoinDelay: time.Duration(ptr.Deref(s.set.Spec.JoinDelaySeconds, 30)) * time.Second, MaxMoves: int(ptr.Deref(s.set.Spec.MaxMovesPerInterval, 100)),
	}
	for _, c := range s.eligible {
		in.Pods = append(in.Pods, shard.Pod{Name: c.Name, Since: c.ReadySince})
	}
	for key, l := range s.leases {
		rec := record.ParseLease(l.Annotations)
		name := ptr.Deref(l.Spec.HolderIdentity, "")
		c, ok := s.eligible[name]
		if !ok || string(c.UID) != rec.HolderUID || (rec.State != record.StateHeld && rec.State != record.StatePending) {
			continue
		}
		in.Owners[key] = name
		if l.Spec.AcquireTime != nil {
			in.Acquired[key] = l.Spec.AcquireTime.Time
		}
		in.Transitions[key] = ptr.Deref(l.Spec.LeaseTransitions, 0)
	}
	return in
}

// candidate is a selected pod as the assignment sees it.
func (r *Reconciler) candidate(ctx context.Context, pod *corev1.Pod, overlapping bool) holder.Candidate {
	var node *corev1.Node
	if pod.Spec.NodeName != "" {
		n := &corev1.Node{}
		if err := r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, n); err == nil {
			node = n
		}
	}
	return holder.NewCandidate(pod, overlapping, node)
}

// otherSelectors are the selectors of the other sets in the namespace. A
// pod that two sets select owns no shard of either: its one annotation
// and label cannot speak for two sets.
func (r *Reconciler) otherSelectors(ctx context.Context, set *fencingv1alpha1.FencedShardSet) ([]labels.Selector, error) {
	sets := &fencingv1alpha1.FencedShardSetList{}
	if err := r.List(ctx, sets, client.InNamespace(set.Namespace)); err != nil {
		return nil, fmt.Errorf("list the FencedShardSets of namespace %s: %w", set.Namespace, err)
	}
	var out []labels.Selector
	for _, o := range sets.Items {
		if o.UID == set.UID {
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(&o.Spec.Selector); err == nil {
			out = append(out, sel)
		}
	}
	return out, nil
}

// overlaps says whether another set selects the pod too.
func overlaps(pod *corev1.Pod, others []labels.Selector) bool {
	for _, sel := range others {
		if sel.Matches(labels.Set(pod.Labels)) {
			return true
		}
	}
	return false
}

// readLeases lists the shards' Leases from the API server.
func (r *Reconciler) readLeases(ctx context.Context, s *scope) error {
	list := &coordinationv1.LeaseList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(s.set.Namespace), client.MatchingLabels{record.LabelShardSet: s.set.Name}); err != nil {
		return fmt.Errorf("list the Leases of FencedShardSet %s: %w", client.ObjectKeyFromObject(s.set), err)
	}
	s.leasesRead = r.Clock.Now()
	s.leases, s.conflicts = map[string]*coordinationv1.Lease{}, map[string]string{}
	wanted := map[string]bool{}
	for _, k := range s.keys {
		wanted[record.ShardLeaseName(s.set.Name, k)] = true
	}
	for i := range list.Items {
		l := &list.Items[i]
		key := l.Labels[record.LabelShard]
		controlled := metav1.IsControlledBy(l, s.set)
		inSet := wanted[l.Name] && l.Name == record.ShardLeaseName(s.set.Name, key)
		switch {
		case controlled && !inSet:
			s.orphans = append(s.orphans, l)
			continue
		case !inSet:
			continue
		case !controlled:
			s.conflicts[key] = l.Name
			continue
		}
		s.leases[key] = l
	}
	return nil
}
