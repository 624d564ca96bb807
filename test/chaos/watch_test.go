//go:build chaos

package chaos

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// recordHistory watches the namespace for the run's history: the holder published
// on each pod (the shards published on each candidate of a shard set), the holder each FencedLease's status names, and every version
// of the protected objects, each stamped with the time it arrived. follow
// reads them from an API server, or, on the HA control plane, from etcd.
func recordHistory(ctx context.Context, follow testenv.FollowFunc, ns string, rec *Recorder) error {
	if err := follow(ctx, ns, &corev1.PodList{}, func() { rec.Gap("pods") }, func(t watch.EventType, o runtime.Object) {
		pod := o.(*corev1.Pod)
		if set := pod.Labels[shardSetLabel]; set != "" {
			recordShards(rec, t, pod, set)
			return
		}
		lease, fence := pod.Annotations[fencingv1alpha1.AnnotationLease], int64(0)
		if t != watch.Deleted && pod.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
			fence = record.FenceOf(pod.Annotations[fencingv1alpha1.AnnotationFence])
		}
		rec.Hold(ViaPod, pod.Name, pod.UID, lease, fence, rec.Now())
	}); err != nil {
		return err
	}
	if err := follow(ctx, ns, &fencingv1alpha1.FencedLeaseList{}, func() { rec.Gap("fencedleases") }, func(t watch.EventType, o runtime.Object) {
		fl := o.(*fencingv1alpha1.FencedLease)
		if h := fl.Status.Holder; h != nil && t != watch.Deleted {
			rec.StatusHolder(fl.Name, h.PodName, h.PodUID, fl.Status.Fence, rec.Now())
		} else {
			rec.StatusHolder(fl.Name, "", "", 0, rec.Now())
		}
	}); err != nil {
		return err
	}
	return follow(ctx, ns, &corev1.ConfigMapList{}, func() { rec.Gap("*") }, func(t watch.EventType, o runtime.Object) {
		cm := o.(*corev1.ConfigMap)
		if cm.Labels[fencingv1alpha1.LabelProtectedBy] == "" || t == watch.Deleted {
			return
		}
		fence := record.FenceOf(cm.Annotations[fencingv1alpha1.AnnotationFence])
		rec.Version(cm.Name, Version{Fence: fence, Value: cm.Data["value"], ResourceVersion: cm.ResourceVersion, At: rec.Now()})
	})
}
