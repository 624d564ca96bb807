package testenv

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// HolderChecker watches the pods and FencedLeases of a namespace and records
// every moment that breaks an invariant of DESIGN §6, as the API server's
// watch reports them in order:
//
//   - more than one pod of a FencedLease published as holder at once;
//   - a fence published that is not greater than one published before for
//     that FencedLease, or published again to a pod that lost it;
//   - a FencedLease status that goes back: a lower fence or transition
//     count, or a holder named again for a grant the status recorded as
//     ended.
type HolderChecker struct {
	mu sync.Mutex
	// pods is the publication of every pod: lease, role, fence.
	pods       map[types.UID]publication
	max        map[string]int64
	lost       map[string]map[int64]bool
	published  []int64
	status     map[types.UID]*statusRecord
	violations []string
}

type publication struct {
	name, lease, role, fence string
}

func (p publication) holds() bool { return p.role == fencingv1alpha1.RoleHolder && p.fence != "" }

type statusRecord struct {
	fence       int64
	transitions int32
	holder      types.UID
	ended       map[int64]bool
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
	hc := &HolderChecker{pods: map[types.UID]publication{}, max: map[string]int64{}, lost: map[string]map[int64]bool{},
		status: map[types.UID]*statusRecord{}}
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

func (hc *HolderChecker) observePod(t watch.EventType, pod *corev1.Pod) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	prev := hc.pods[pod.UID]
	cur := publication{name: pod.Name, lease: pod.Annotations[fencingv1alpha1.AnnotationLease],
		role: pod.Annotations[fencingv1alpha1.AnnotationRole], fence: pod.Annotations[fencingv1alpha1.AnnotationFence]}
	if t == watch.Deleted {
		cur = publication{name: pod.Name}
		delete(hc.pods, pod.UID)
	} else {
		hc.pods[pod.UID] = cur
	}
	if prev.holds() && (prev.lease != cur.lease || prev.fence != cur.fence || !cur.holds()) {
		if n, err := record.ParseFence(prev.fence); err == nil {
			if hc.lost[prev.lease] == nil {
				hc.lost[prev.lease] = map[int64]bool{}
			}
			hc.lost[prev.lease][n] = true
		}
	}
	if !cur.holds() || (prev.holds() && prev.lease == cur.lease && prev.fence == cur.fence) {
		return
	}
	n, err := record.ParseFence(cur.fence)
	switch {
	case err != nil:
		hc.fail("pod %s got malformed fence %q", pod.Name, cur.fence)
	case n < hc.max[cur.lease]:
		hc.fail("pod %s got fence %d of FencedLease %s after fence %d was published", pod.Name, n, cur.lease, hc.max[cur.lease])
	case hc.lost[cur.lease][n]:
		hc.fail("pod %s got fence %d of FencedLease %s again after losing it", pod.Name, n, cur.lease)
	case n > hc.max[cur.lease]:
		hc.max[cur.lease] = n
		hc.published = append(hc.published, n)
	}
	var holders []string
	for _, p := range hc.pods {
		if p.holds() && p.lease == cur.lease {
			holders = append(holders, p.name+"="+p.fence)
		}
	}
	if len(holders) > 1 {
		sort.Strings(holders)
		hc.fail("%d pods published as holder of FencedLease %s at once: %v", len(holders), cur.lease, holders)
	}
}

func (hc *HolderChecker) observeStatus(fl *fencingv1alpha1.FencedLease) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	rec := hc.status[fl.UID]
	if rec == nil {
		rec = &statusRecord{ended: map[int64]bool{}}
		hc.status[fl.UID] = rec
	}
	st := fl.Status
	var holder types.UID
	if st.Holder != nil {
		holder = st.Holder.PodUID
	}
	switch {
	case st.Fence < rec.fence:
		hc.fail("status of FencedLease %s went back from fence %d to %d", fl.Name, rec.fence, st.Fence)
	case st.Transitions < rec.transitions:
		hc.fail("status of FencedLease %s went back from %d transitions to %d", fl.Name, rec.transitions, st.Transitions)
	case holder != "" && rec.ended[st.Fence]:
		hc.fail("status of FencedLease %s names holder %s with fence %d again after it recorded the end of that grant", fl.Name, st.Holder.PodName, st.Fence)
	}
	if rec.holder != "" && (holder != rec.holder || st.Fence != rec.fence) {
		rec.ended[rec.fence] = true
	}
	rec.fence, rec.transitions, rec.holder = max(rec.fence, st.Fence), max(rec.transitions, st.Transitions), holder
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
