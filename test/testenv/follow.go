package testenv

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Follow lists the kind in the namespace, hands every item to handle as
// Added, and then every change from the list's resourceVersion on, in order,
// resuming the watch whenever the API server closes it (it does so every few
// minutes). A watch that cannot resume (its resourceVersion was compacted)
// calls gap and stops: the history after it is incomplete, and a checker
// must say so rather than pass.
func Follow(ctx context.Context, c client.WithWatch, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error {
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
