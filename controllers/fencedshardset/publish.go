package fencedshardset

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/record"
)

// publish tells every pod its shards: those whose grant, as the API server
// holds it after this reconcile's writes, is committed to the pod.
//
// Why a publication never tells a pod a shard it lost. The pods are read
// before the Leases, and each pod is written with its resourceVersion as a
// precondition. Before a shard is published to a new owner, the pod of the
// grant it replaced (the Lease's previous holder) is written in this
// reconcile, after the Lease write that replaced the grant: its shards
// without the lost one, and a new mark. So a reconcile (of this replica, or
// of a paused one) that read the Lease before it moved on read that pod
// before the mark, and its write of the pod fails; one that read the pod
// after the mark read the Lease after the move, and does not publish the
// lost shard. A shard the set no longer has (it shrank, or is being
// deleted) has its grant revoked and its holder marked the same way before
// its Lease is deleted (orphans.go).
//
// Within a reconcile, every pod that loses shards or is marked is written
// before any pod gains one, so that no moment shows a shard with two
// owners.
func (r *Reconciler) publish(ctx context.Context, s *scope) error {
	owned := map[string]map[string]int64{}
	for key, l := range s.leases {
		rec := record.ParseLease(l.Annotations)
		if !rec.Held() {
			continue
		}
		pod, ok := s.pods[ptr.Deref(l.Spec.HolderIdentity, "")]
		if !ok || string(pod.UID) != rec.HolderUID {
			continue
		}
		if owned[pod.Name] == nil {
			owned[pod.Name] = map[string]int64{}
		}
		owned[pod.Name][key] = rec.Fence
	}
	marks := r.marksFor(s, owned)
	if err := r.markAndTake(ctx, s, owned, marks); err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.pods)) { // in one order, so that a run is replayed exactly
		pod := s.pods[name]
		if err := r.writeShards(ctx, pod, s.set.Name, record.FormatShards(owned[name]), labelled(s, name, owned[name]), false); err != nil {
			errs = append(errs, err)
		}
	}
	return kerrors.NewAggregate(errs)
}

// marksFor returns the pods to mark (name to UID): the previous holders of
// the shards about to be published to a pod that does not list them yet,
// and the holders of the shards whose Leases this reconcile deleted.
func (r *Reconciler) marksFor(s *scope, owned map[string]map[string]int64) map[string]string {
	marks := map[string]string{}
	for name, uid := range s.marks {
		marks[name] = uid
	}
	for name, shards := range owned {
		current, err := record.ParseShards(s.pods[name].Annotations[record.AnnotationShards])
		if err != nil {
			current = nil
		}
		for key, fence := range shards {
			if current[key] == fence {
				continue
			}
			for _, h := range record.PreviousHolders(s.leases[key].Annotations) {
				marks[h.Name] = h.UID
			}
		}
	}
	return marks
}

// markAndTake writes, before any pod gains a shard, every pod that loses
// shards and every pod to mark: its shards it still owns, and for a marked
// one a new mark. A marked pod the set has not read (no longer selected
// nor labelled) is read from the API server. Any failure stops the
// publication.
func (r *Reconciler) markAndTake(ctx context.Context, s *scope, owned map[string]map[string]int64, marks map[string]string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(marks)) {
		uid := marks[name]
		if _, known := s.pods[name]; known {
			continue
		}
		pod := &corev1.Pod{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.set.Namespace, Name: name}, pod)
		switch {
		case apierrors.IsNotFound(err):
			continue // gone: nobody can write it any more
		case err != nil:
			errs = append(errs, fmt.Errorf("read pod %s to mark it: %w", klog.KRef(s.set.Namespace, name), err))
			continue
		}
		if string(pod.UID) == uid {
			s.pods[name] = pod
			ownedBy(s, pod, owned)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.pods)) {
		pod := s.pods[name]
		current, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
		if err != nil {
			current = nil // what does not parse is replaced
		}
		keep := map[string]int64{}
		for key, fence := range current {
			if owned[name][key] == fence {
				keep[key] = fence
			}
		}
		mark := marks[name] != "" && marks[name] == string(pod.UID)
		if len(keep) == len(current) && !mark {
			continue
		}
		if err := r.writeShards(ctx, pod, s.set.Name, record.FormatShards(keep), labelled(s, name, keep), mark); err != nil {
			errs = append(errs, err)
		}
	}
	return kerrors.NewAggregate(errs)
}

// ownedBy adds to owned the shards that a pod read late (a marked pod the
// cache did not show, read after the Leases) may still own: those whose
// Lease, as read, holds its grant with that fence, and those granted
// with a fence above the Lease's as read, a grant committed after the read
// that this reconcile knows nothing of. Taking those would tell the pod it
// lost a grant it may still hold, whose fence it could be told again.
func ownedBy(s *scope, pod *corev1.Pod, owned map[string]map[string]int64) {
	if owned == nil {
		return
	}
	current, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
	if err != nil {
		return
	}
	for key, fence := range current {
		l, known := s.leases[key]
		if known {
			rec := record.ParseLease(l.Annotations)
			mine := rec.Held() && ptr.Deref(l.Spec.HolderIdentity, "") == pod.Name && rec.HolderUID == string(pod.UID) && rec.Fence == fence
			if !mine && fence <= rec.Fence {
				continue
			}
		}
		if owned[pod.Name] == nil {
			owned[pod.Name] = map[string]int64{}
		}
		owned[pod.Name][key] = fence
	}
}

// labelled says whether a pod carries the set's label: while it owns
// shards, and while it is an eligible candidate (a pod that two sets
// select is not, and carries neither's).
func labelled(s *scope, name string, owned map[string]int64) bool {
	_, eligible := s.eligible[name]
	return eligible || len(owned) > 0
}

// marks counts the marks this process wrote, so that no two are the same.
var marks atomic.Int64

// writeShards writes a pod's shards and its set label, when they differ
// from what the pod carries or mark asks for a new mark, with the pod's
// resourceVersion as a precondition. A pod that is gone needs nothing.
func (r *Reconciler) writeShards(ctx context.Context, pod *corev1.Pod, set, shards string, labelled, mark bool) error {
	has := pod.Labels[record.LabelShardSet] == set
	if pod.Annotations[record.AnnotationShards] == shards && has == labelled && !mark {
		return nil
	}
	base := pod.DeepCopy()
	p := pod.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if shards == "" {
		delete(p.Annotations, record.AnnotationShards)
	} else {
		p.Annotations[record.AnnotationShards] = shards
	}
	if mark {
		p.Annotations[record.AnnotationShardsMark] = fmt.Sprintf("%d-%d", time.Now().UnixNano(), marks.Add(1))
	}
	if labelled {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[record.LabelShardSet] = set
	} else if has {
		delete(p.Labels, record.LabelShardSet)
	}
	err := r.Patch(ctx, p, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("publish the shards of pod %s: %w", klog.KObj(pod), err)
	}
	*pod = *p // the next write of the pod goes on from this one
	return nil
}
