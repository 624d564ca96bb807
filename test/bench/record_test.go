//go:build bench

package bench_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
)

// recorder remembers when the test's watches first saw each publication:
// the FencedLeases' holders, the pods' roles and the Leases' holders and
// renewals, all in one namespace, by the time of the event's arrival.
type recorder struct {
	mu sync.Mutex
	// status: FencedLease -> grants seen in its status, in order.
	status map[string][]grantSeen
	// annotated: pod/fence -> first seen with role holder and that fence.
	annotated map[string]time.Time
	// role: pod -> its role annotation now.
	role map[string]string
	// holder: Lease/holderIdentity -> first seen.
	holder map[string]time.Time
	// renewed: Lease/transitions -> the latest renewTime of that grant;
	// renewedBy: Lease/holderIdentity -> the same by holder.
	renewed, renewedBy map[string]time.Time
	// knows: pod/fence -> when the pod's process learned it holds.
	knows map[string]time.Time
	// onPod, if set, is called with every pod event after it was recorded.
	onPod func(*corev1.Pod)
	// changed is closed, and replaced, whenever anything was recorded.
	changed chan struct{}
}

type grantSeen struct {
	pod   string
	fence int64
	at    time.Time
}

func newRecorder(ctx context.Context, t *testing.T, ns string) *recorder {
	r := &recorder{status: map[string][]grantSeen{}, annotated: map[string]time.Time{}, role: map[string]string{},
		holder: map[string]time.Time{}, renewed: map[string]time.Time{}, renewedBy: map[string]time.Time{}, knows: map[string]time.Time{},
		changed: make(chan struct{})}
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range []client.ObjectList{&fencingv1alpha1.FencedLeaseList{}, &corev1.PodList{}, &coordinationv1.LeaseList{}} {
		w, err := c.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		go r.follow(ctx, c, ns, list, w)
	}
	return r
}

// follow applies the events of one watch, and watches again from the last
// version seen if the API server ends it.
func (r *recorder) follow(ctx context.Context, c client.WithWatch, ns string, list client.ObjectList, w watch.Interface) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				rv = "" // too old: from now on
			}
			if o, ok := ev.Object.(client.Object); ok && ev.Type != watch.Error {
				rv = o.GetResourceVersion()
				if ev.Type != watch.Deleted {
					r.see(o, now)
					if p, ok := o.(*corev1.Pod); ok && r.onPod != nil {
						r.onPod(p)
					}
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		for {
			next, err := c.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err == nil {
				w = next
				break
			}
			if ctx.Err() != nil {
				return
			}
			rv = "" // too old: from now on
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (r *recorder) see(o client.Object, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.notify()
	switch o := o.(type) {
	case *fencingv1alpha1.FencedLease:
		h := o.Status.Holder
		if h == nil || o.Status.Fence == 0 {
			return
		}
		seen := r.status[o.Name]
		if n := len(seen); n == 0 || seen[n-1].fence != o.Status.Fence || seen[n-1].pod != h.PodName {
			r.status[o.Name] = append(seen, grantSeen{pod: h.PodName, fence: o.Status.Fence, at: now})
		}
	case *corev1.Pod:
		role := o.Annotations[fencingv1alpha1.AnnotationRole]
		r.role[o.Name] = role
		if role == fencingv1alpha1.RoleHolder {
			key := o.Name + "/" + o.Annotations[fencingv1alpha1.AnnotationFence]
			if _, ok := r.annotated[key]; !ok {
				r.annotated[key] = now
			}
		}
	case *coordinationv1.Lease:
		id := ptr.Deref(o.Spec.HolderIdentity, "")
		tr := strconv.Itoa(int(ptr.Deref(o.Spec.LeaseTransitions, 0)))
		if id == "" {
			return
		}
		if key := o.Name + "/" + id; r.holder[key].IsZero() {
			r.holder[key] = now
		}
		if rt := o.Spec.RenewTime; rt != nil {
			r.renewed[o.Name+"/"+tr] = rt.Time
			r.renewedBy[o.Name+"/"+id] = rt.Time
		}
	}
}

// learned records that the pod's process learned it holds with fence.
func (r *recorder) learned(pod string, fence int64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := fmt.Sprintf("%s/%d", pod, fence)
	if _, ok := r.knows[key]; !ok {
		r.knows[key] = at
	}
	r.notify()
}

// notify wakes the waiters of poll; the caller holds r.mu.
func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// poll calls f under the lock whenever something was recorded until it
// returns true, or fails after timeout. The times it finds are those of the
// events, not of the wakeup.
func (r *recorder) poll(ctx context.Context, timeout time.Duration, what string, f func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, changed := f(), r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("%s: not seen within %s", what, timeout)
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
	}
}
