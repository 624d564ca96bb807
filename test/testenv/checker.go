package testenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// HolderChecker watches the pods of a namespace and records every moment that
// breaks the invariants of the lease: more than one pod published as holder,
// or a fence published that is not greater than one published before.
type HolderChecker struct {
	mu         sync.Mutex
	roles      map[string]string
	fences     map[string]string
	max        int64
	published  []int64
	violations []string
}

// WatchHolders starts a checker on the namespace until ctx ends.
func WatchHolders(ctx context.Context, cfg *rest.Config, ns string) (*HolderChecker, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		return nil, fmt.Errorf("watch pods in %s: %w", ns, err)
	}
	hc := &HolderChecker{roles: map[string]string{}, fences: map[string]string{}}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if pod, isPod := ev.Object.(*corev1.Pod); isPod {
					hc.observe(ev.Type, pod)
				}
			}
		}
	}()
	return hc, nil
}

func (hc *HolderChecker) observe(t watch.EventType, pod *corev1.Pod) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	key := string(pod.UID)
	if t == watch.Deleted {
		delete(hc.roles, key)
		delete(hc.fences, key)
		return
	}
	role, fence := pod.Annotations[fencingv1alpha1.AnnotationRole], pod.Annotations[fencingv1alpha1.AnnotationFence]
	if fence != "" && fence != hc.fences[key] {
		n, err := strconv.ParseInt(fence, 10, 64)
		switch {
		case err != nil:
			hc.violations = append(hc.violations, fmt.Sprintf("pod %s got malformed fence %q", pod.Name, fence))
		case n <= hc.max:
			hc.violations = append(hc.violations, fmt.Sprintf("pod %s got fence %d after fence %d was published", pod.Name, n, hc.max))
		default:
			hc.max = n
			hc.published = append(hc.published, n)
		}
	}
	hc.roles[key], hc.fences[key] = role, fence
	holders := 0
	for k, r := range hc.roles {
		if r == fencingv1alpha1.RoleHolder && hc.fences[k] != "" {
			holders++
		}
	}
	if holders > 1 {
		hc.violations = append(hc.violations, fmt.Sprintf("%d pods published as holder at once (after an update of pod %s)", holders, pod.Name))
	}
}

// Violations returns every broken invariant seen so far.
func (hc *HolderChecker) Violations() []string {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return append([]string(nil), hc.violations...)
}

// Published returns the fences published to pods, in order.
func (hc *HolderChecker) Published() []int64 {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return append([]int64(nil), hc.published...)
}
