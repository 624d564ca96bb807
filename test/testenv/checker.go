package testenv

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/invariant"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// HolderChecker watches the pods and FencedLeases of a namespace and records
// every moment that breaks an invariant of docs/design.md, as the API server's
// watch reports them in order. The rules are internal/invariant's:
//
//   - more than one pod of a FencedLease published as holder at once;
//   - a fence published below one published before for that FencedLease,
//     to a second pod, or again to a pod that lost it;
//   - a FencedLease status that goes back: a lower fence or transition
//     count, or a holder named again for a grant the status recorded as
//     ended.
type HolderChecker struct {
	mu           sync.Mutex
	publications *invariant.Publications
	statuses     *invariant.Statuses
	published    []int64
	violations   []string
}

// WatchHolders starts a checker on the namespace until ctx ends, fed by the
// API server's watches.
func WatchHolders(ctx context.Context, cfg *rest.Config, ns string) (*HolderChecker, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	return WatchHoldersWith(ctx, ns, func(ctx context.Context, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error {
		return Follow(ctx, c, ns, list, gap, handle)
	})
}

// FollowFunc hands every object of a kind in a namespace to handle, then
// every change, in order, as Follow does; gap says that changes were missed.
type FollowFunc func(ctx context.Context, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error

// WatchHoldersWith starts a checker on the namespace until ctx ends, fed by
// follow: an HA control plane's history is read from etcd itself
// (test/cluster FollowStorage), which no API server restart interrupts.
func WatchHoldersWith(ctx context.Context, ns string, follow FollowFunc) (*HolderChecker, error) {
	hc := &HolderChecker{publications: invariant.NewPublications(), statuses: invariant.NewStatuses()}
	gap := func(kind string) func() {
		return func() {
			hc.locked(func() { hc.fail("the watch of %s in %s could not resume: the history is incomplete", kind, ns) })
		}
	}
	if err := follow(ctx, ns, &corev1.PodList{}, gap("pods"), func(t watch.EventType, o runtime.Object) {
		hc.observePod(t, o.(*corev1.Pod))
	}); err != nil {
		return nil, err
	}
	if err := follow(ctx, ns, &fencingv1alpha1.FencedLeaseList{}, gap("FencedLeases"), func(t watch.EventType, o runtime.Object) {
		if t != watch.Deleted {
			hc.observeStatus(o.(*fencingv1alpha1.FencedLease))
		}
	}); err != nil {
		return nil, err
	}
	return hc, nil
}

func (hc *HolderChecker) locked(f func()) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	f()
}

func (hc *HolderChecker) fail(format string, args ...any) {
	hc.violations = append(hc.violations, fmt.Sprintf(format, args...))
}

func (hc *HolderChecker) report(vs []invariant.Violation) {
	for _, v := range vs {
		hc.violations = append(hc.violations, v.Detail)
	}
}

func (hc *HolderChecker) observePod(t watch.EventType, pod *corev1.Pod) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if t == watch.Deleted {
		hc.publications.Gone(string(pod.UID))
		return
	}
	lease, fence := record.Published(pod.Annotations)
	before := hc.publications.Highest(lease)
	hc.report(hc.publications.Observe(invariant.Publication{Pod: pod.Name, UID: string(pod.UID), Lease: lease, Fence: fence,
		Raw: pod.Annotations[fencingv1alpha1.AnnotationFence]}))
	if h := hc.publications.Highest(lease); h > before {
		hc.published = append(hc.published, h)
	}
}

func (hc *HolderChecker) observeStatus(fl *fencingv1alpha1.FencedLease) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	st := invariant.Status{FencedLease: fl.Name, UID: string(fl.UID), Fence: fl.Status.Fence, Transitions: fl.Status.Transitions}
	if h := fl.Status.Holder; h != nil {
		st.HolderUID, st.HolderName = string(h.PodUID), h.PodName
	}
	hc.report(hc.statuses.Observe(st))
}

// Violations returns every broken invariant seen so far.
func (hc *HolderChecker) Violations() []string {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return append([]string(nil), hc.violations...)
}

// Published returns the fences published to pods, in order (each once).
func (hc *HolderChecker) Published() []int64 {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return append([]int64(nil), hc.published...)
}
