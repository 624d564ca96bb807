//go:build bench

package bench_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// The causes of a handoff.
const (
	graceful = "graceful"
	crash    = "crash"
	nodeLost = "node lost"
)

// flGroup is one FencedLease whose two pods hand it to each other, one
// cause after another.
type flGroup struct {
	w        *world
	name     string
	takeover fencingv1alpha1.TakeoverPolicy
	cause    string
	leaseDur time.Duration
	pods     []string // the two current pods
	nodes    map[string]string
	seq      int
}

// run sets the group up and measures n handoffs.
func (g *flGroup) run(n int, grace time.Duration) ([]Sample, error) {
	w := g.w
	arrived := false
	defer func() {
		if !arrived {
			w.steady.arrived.Done() // failed before it: not waited for
		}
	}()
	labels := map[string]string{"app": g.name}
	if err := w.c.Create(w.ctx, testenv.FencedLease(w.ns, g.name, labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = g.takeover
		fl.Spec.LeaseDurationSeconds = int32(g.leaseDur / time.Second)
	})); err != nil {
		return nil, fmt.Errorf("create FencedLease %s: %w", g.name, err)
	}
	g.nodes = map[string]string{}
	for i := range 2 {
		node := sharedNode(len(g.name) + i)
		if g.cause == nodeLost {
			node = fmt.Sprintf("%s-%c", g.name, 'a'+i)
			if err := w.heartbeat(node); err != nil {
				return nil, err
			}
		}
		if err := g.newPod(node, time.Now().Add(-time.Duration(i+1)*time.Hour)); err != nil {
			return nil, err
		}
	}
	timeout := g.leaseDur + grace + 30*time.Second
	var first grantSeen
	if err := w.rec.poll(w.ctx, timeout, "first grant of "+g.name, func() bool {
		if s := w.rec.status[g.name]; len(s) > 0 {
			first = s[len(s)-1]
			return !w.rec.annotated[fmt.Sprintf("%s/%d", first.pod, first.fence)].IsZero()
		}
		return false
	}); err != nil {
		return nil, err
	}
	// Steady before the first handoff, as before every other: the other
	// pod published as standby.
	if err := w.rec.poll(w.ctx, timeout, "a standby of "+g.name, func() bool {
		for _, p := range g.pods {
			if p != first.pod && w.rec.role[p] == fencingv1alpha1.RoleStandby {
				return true
			}
		}
		return false
	}); err != nil {
		return nil, err
	}
	time.Sleep(300 * time.Millisecond)
	arrived = true
	w.steady.arrive()
	var out []Sample
	cur := first
	for range n {
		jitter()
		s, next, err := g.handOver(cur, timeout)
		if err != nil {
			return out, fmt.Errorf("FencedLease %s, handoff %d: %w", g.name, len(out)+1, err)
		}
		out = append(out, s)
		cur = next
	}
	return out, nil
}

// jitter waits a random 0-3 s, so that the groups' handoffs do not all
// fall at once and land at random points of the renew interval.
func jitter() { time.Sleep(rand.N(3 * time.Second)) }

func sharedNode(i int) string { return fmt.Sprintf("bench-node-%d", i%4) }

func (g *flGroup) newPod(node string, readySince time.Time) error {
	name := fmt.Sprintf("%s-%d", g.name, g.seq)
	g.seq++
	if err := g.w.startPod(name, g.name, node, map[string]string{"app": g.name}, readySince); err != nil {
		return err
	}
	g.pods = append(g.pods, name)
	g.nodes[name] = node
	return nil
}

// handOver applies the cause to the holder and measures until the other
// pod is published, and until its process knows.
func (g *flGroup) handOver(cur grantSeen, timeout time.Duration) (Sample, grantSeen, error) {
	w := g.w
	l := &coordinationv1.Lease{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: g.name}, l); err != nil {
		return Sample{}, cur, fmt.Errorf("get Lease: %w", err)
	}
	transitions := ptr.Deref(l.Spec.LeaseTransitions, 0)
	pod := &corev1.Pod{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: cur.pod}, pod); err != nil {
		return Sample{}, cur, fmt.Errorf("get pod: %w", err)
	}
	var t0 time.Time
	switch g.cause {
	case graceful:
		t0 = time.Now()
		if err := w.c.Delete(w.ctx, pod); err != nil {
			return Sample{}, cur, fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	case crash:
		for i := range pod.Status.Conditions {
			if c := &pod.Status.Conditions[i]; c.Type == corev1.ContainersReady || c.Type == corev1.PodReady {
				c.Status, c.LastTransitionTime = corev1.ConditionFalse, metav1.Now()
			}
		}
		t0 = time.Now()
		if err := w.c.Status().Update(w.ctx, pod); err != nil {
			return Sample{}, cur, fmt.Errorf("containers of pod %s not ready: %w", pod.Name, err)
		}
	case nodeLost:
		t0 = time.Now()
		w.stopHeartbeat(g.nodes[cur.pod])
	}
	var next grantSeen
	var published time.Time
	if err := w.rec.poll(w.ctx, timeout, "the next holder published", func() bool {
		for _, s := range w.rec.status[g.name] {
			if s.fence > cur.fence && s.pod != cur.pod {
				next = s
				at := w.rec.annotated[fmt.Sprintf("%s/%d", s.pod, s.fence)]
				published = latest(s.at, at)
				return !at.IsZero()
			}
		}
		return false
	}); err != nil {
		return Sample{}, cur, err
	}
	var knows, renewed time.Time
	if err := w.rec.poll(w.ctx, 10*time.Second, "the next holder's process knows", func() bool {
		knows = w.rec.knows[fmt.Sprintf("%s/%d", next.pod, next.fence)]
		renewed = w.rec.renewed[fmt.Sprintf("%s/%d", g.name, transitions)]
		return !knows.IsZero()
	}); err != nil {
		return Sample{}, cur, err
	}
	s := Sample{Published: ms(published.Sub(t0)), Knows: ms(knows.Sub(t0)), AfterRenewal: ms(published.Sub(renewed))}
	return s, next, g.restore(cur.pod)
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// restore undoes the cause: a replacement pod for a deleted one, the
// containers ready again, the node back; then the next standby is in place.
func (g *flGroup) restore(old string) error {
	w := g.w
	pod := &corev1.Pod{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: old}, pod); err != nil {
		return fmt.Errorf("get pod %s: %w", old, err)
	}
	standby := old
	switch g.cause {
	case graceful:
		if err := w.c.Delete(w.ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s for good: %w", old, err)
		}
		w.stopProcess(old)
		node := g.nodes[old]
		g.pods = without(g.pods, old)
		if err := g.newPod(node, time.Now().Add(-time.Minute)); err != nil {
			return err
		}
		standby = g.pods[len(g.pods)-1]
	case crash:
		if err := testenv.SetReady(w.ctx, w.c, pod, time.Now().Add(-time.Minute).Truncate(time.Second)); err != nil {
			return err
		}
	case nodeLost:
		node := g.nodes[old]
		if err := w.heartbeat(node); err != nil {
			return err
		}
		if err := pollErr(w, 60*time.Second, "node "+node+" healthy again", func() (bool, error) { return w.nodeHealthy(node) }); err != nil {
			return err
		}
	}
	if err := w.rec.poll(w.ctx, 30*time.Second, "pod "+standby+" published as standby", func() bool {
		return w.rec.role[standby] == fencingv1alpha1.RoleStandby
	}); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond) // the operator has seen it ready
	return nil
}

func without(list []string, s string) []string {
	var out []string
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}

func pollErr(w *world, timeout time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) || w.ctx.Err() != nil {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
