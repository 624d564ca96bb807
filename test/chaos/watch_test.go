//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// record watches the namespace for the run's history: the holder published
// on each pod, the holder each FencedLease's status names, and every version
// of the protected objects, each stamped with the time it arrived.
func record(ctx context.Context, cfg *rest.Config, ns string, rec *Recorder) error {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return fmt.Errorf("create watch client: %w", err)
	}
	if err := follow(ctx, c, ns, &corev1.PodList{}, func() { rec.Gap("pods") }, func(t watch.EventType, o runtime.Object) {
		pod := o.(*corev1.Pod)
		lease, fence := pod.Annotations[fencingv1alpha1.AnnotationLease], int64(0)
		if t != watch.Deleted && pod.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
			fence, _ = strconv.ParseInt(pod.Annotations[fencingv1alpha1.AnnotationFence], 10, 64)
		}
		rec.Hold(ViaPod, pod.Name, pod.UID, lease, fence, rec.Now())
	}); err != nil {
		return err
	}
	if err := follow(ctx, c, ns, &fencingv1alpha1.FencedLeaseList{}, func() { rec.Gap("fencedleases") }, func(t watch.EventType, o runtime.Object) {
		fl := o.(*fencingv1alpha1.FencedLease)
		if h := fl.Status.Holder; h != nil && t != watch.Deleted {
			rec.StatusHolder(fl.Name, h.PodName, h.PodUID, fl.Status.Fence, rec.Now())
		} else {
			rec.StatusHolder(fl.Name, "", "", 0, rec.Now())
		}
	}); err != nil {
		return err
	}
	return follow(ctx, c, ns, &corev1.ConfigMapList{}, func() { rec.Gap("*") }, func(t watch.EventType, o runtime.Object) {
		cm := o.(*corev1.ConfigMap)
		if cm.Labels[fencingv1alpha1.LabelProtectedBy] == "" || t == watch.Deleted {
			return
		}
		fence, _ := strconv.ParseInt(cm.Annotations[fencingv1alpha1.AnnotationFence], 10, 64)
		rec.Version(cm.Name, Version{Fence: fence, Value: cm.Data["value"], ResourceVersion: cm.ResourceVersion, At: rec.Now()})
	})
}

// follow lists the kind in the namespace, hands every item to handle as
// Added, and then every change from the list's resourceVersion on, in order,
// resuming the watch whenever the API server closes it. A watch that cannot
// resume (its resourceVersion was compacted) calls gap and stops.
func follow(ctx context.Context, c client.WithWatch, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error {
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list %T in %s: %w", list, ns, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	for _, o := range items {
		handle(watch.Added, o)
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return c.Watch(ctx, list.DeepCopyObject().(client.ObjectList), &client.ListOptions{Namespace: ns, Raw: &o})
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), lw)
	if err != nil {
		return fmt.Errorf("watch %T in %s: %w", list, ns, err)
	}
	go func() {
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				switch {
				case !ok:
					if ctx.Err() == nil {
						gap()
					}
					return
				case ev.Type == watch.Error:
					gap()
				case ev.Type != watch.Bookmark:
					handle(ev.Type, ev.Object)
				}
			}
		}
	}()
	return nil
}
