package fencedshardset

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/record"
)

// publish tells every pod its shards: those whose grant, as the API server
// holds it after this reconcile's writes, is committed to the pod.
//
// Why a publication never tells a pod a shard it lost: the pods were read
// before the Leases, and each pod is written with its resourceVersion as a
// precondition. A revocation is written to the Lease before the shard is
// taken from its owner's annotation. So if a reconcile (of this replica
// or of a paused one) read a Lease from before a revocation, it read the
// pod before the annotation was taken from it: its write carries a
// resourceVersion that the removal changed, and fails.
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
	// Shards are taken from the pods that lose them before any pod is
	// given one: under Immediate a shard's old and new owner are written
	// in the same reconcile, and no moment may show both as its owner.
	var errs []error
	for name, pod := range s.pods {
		current, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
		if err != nil {
			current = nil // what does not parse is replaced below
		}
		keep := map[string]int64{}
		for key, fence := range current {
			if owned[name][key] == fence {
				keep[key] = fence
			}
		}
		if len(keep) == len(current) {
			continue
		}
		if err := r.writeShards(ctx, pod, s.set.Name, record.FormatShards(keep), labelled(s, name, keep)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return kerrors.NewAggregate(errs)
	}
	for name, pod := range s.pods {
		if err := r.writeShards(ctx, pod, s.set.Name, record.FormatShards(owned[name]), labelled(s, name, owned[name])); err != nil {
			errs = append(errs, err)
		}
	}
	return kerrors.NewAggregate(errs)
}

// labelled says whether a pod carries the set's label: while it owns
// shards, and while it is an eligible candidate (a pod that two sets
// select is not, and carries neither's).
func labelled(s *scope, name string, owned map[string]int64) bool {
	_, eligible := s.eligible[name]
	return eligible || len(owned) > 0
}

// writeShards writes a pod's shards and its set label, when they differ
// from what the pod carries, with the pod's resourceVersion as a
// precondition. A pod that is gone needs nothing.
func (r *Reconciler) writeShards(ctx context.Context, pod *corev1.Pod, set, shards string, labelled bool) error {
	has := pod.Labels[record.LabelShardSet] == set
	if pod.Annotations[record.AnnotationShards] == shards && has == labelled {
		return nil
	}
	base := pod.DeepCopy()
	p := pod.DeepCopy()
	if shards == "" {
		delete(p.Annotations, record.AnnotationShards)
	} else {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[record.AnnotationShards] = shards
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
