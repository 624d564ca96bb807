package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// shardedSet is the FencedShardSet of the sharded tests, and shardCount
// its spec.shards.
const (
	shardedSet = "widgets"
	shardCount = 4
)

// shardedPod is a pod of the set with a sharded manager run in the test
// process as that pod, with its bound token, and its shards file in a
// directory of its own, written from the pod's annotation as the kubelet
// projects it, until paused.
type shardedPod struct {
	pod    *corev1.Pod
	dir    string
	mgr    *fencedcontroller.ShardedManager
	paused atomic.Bool
	stop   context.CancelFunc
	exited chan struct{}
	// stopFiles stops writing the shards file.
	stopFiles context.CancelFunc
}

// shardedPodFiles creates a ready pod of the set and keeps its shards
// file written from its annotation.
func (f *fixture) shardedPodFiles(name string) *shardedPod {
	pod, err := testenv.CreatePod(f.ctx, admin, testenv.Pod{Namespace: f.ns, Name: name,
		Labels: map[string]string{"app": "widget-sharded"}, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, admin, pod, time.Now().Add(-time.Minute))).To(Succeed())
	p := &shardedPod{pod: pod, dir: f.t.TempDir(), exited: make(chan struct{})}
	f.g.Expect(p.project(fence.Shards{})).To(Succeed())
	ctx, cancel := context.WithCancel(f.ctx)
	p.stop, p.stopFiles = cancel, cancel
	go p.follow(ctx)
	return p
}

// startShardedPod creates a ready pod of the set and runs its manager.
func (f *fixture) startShardedPod(name string) *shardedPod {
	p := f.shardedPodFiles(name)
	ctx, pod := f.ctx, p.pod
	token, err := testenv.PodToken(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	skip := true
	p.mgr, err = fencedcontroller.NewShardedManager(cfg, manager.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
		Controller: config.Controller{SkipNameValidation: &skip},
	}, fencedcontroller.ShardedOptions{Set: shardedSet, Namespace: f.ns, ShardOf: fencedcontroller.ShardByName(shardCount),
		Dir: p.dir, Poll: 100 * time.Millisecond, FieldManager: "widget-controller"})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(p.mgr.Controller("widget", &examplesv1alpha1.Widget{}, &ownerReconciler{c: p.mgr.GetClient(), pod: name})).To(Succeed())
	ctx, cancel := context.WithCancel(ctx)
	p.stop = func() { cancel(); p.stopFiles() }
	go func() {
		defer close(p.exited)
		if err := p.mgr.Start(ctx); err != nil {
			f.t.Errorf("sharded manager of pod %s: %v", name, err)
		}
	}()
	f.t.Cleanup(func() { cancel(); <-p.exited })
	return p
}

// project writes the shards file as the kubelet does: a whole new file
// renamed in place.
func (p *shardedPod) project(shards fence.Shards) error {
	data := "{"
	first := true
	for key, fenceValue := range shards {
		if !first {
			data += ","
		}
		first = false
		data += fmt.Sprintf("%q:%q", key, fmt.Sprint(fenceValue))
	}
	data += "}"
	tmp := filepath.Join(p.dir, ".shards.tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(p.dir, fence.ShardsFile))
}

// follow projects the pod's annotation to its shards file until ctx ends,
// except while paused, as a kubelet that stopped syncing the pod.
func (p *shardedPod) follow(ctx context.Context) {
	var last map[string]int64
	for ctx.Err() == nil {
		pod := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(p.pod), pod); err == nil && !p.paused.Load() {
			if shards, err := record.ParseShards(pod.Annotations[record.AnnotationShards]); err == nil && !maps.Equal(shards, last) {
				if p.project(shards) == nil {
					last = shards
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		}
	}
}

// ownerReconciler records in each Widget's status the pod that reconciled
// it and the fence it wrote with; it writes only when they differ.
type ownerReconciler struct {
	c   client.Client
	pod string
	mu  sync.Mutex
}

func (r *ownerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &examplesv1alpha1.Widget{}
	if err := r.c.Get(ctx, req.NamespacedName, w); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	fenceValue, _ := fencedcontroller.FenceFromContext(ctx)
	if w.Labels[fencedcontroller.LabelShard] == "" {
		if err := r.c.Update(ctx, w); err != nil {
			return reconcile.Result{}, err
		}
	}
	if w.Status.Holder == r.pod && w.Status.Fence == fenceValue {
		return reconcile.Result{}, nil
	}
	w.Status.Holder, w.Status.Fence = r.pod, fenceValue
	return reconcile.Result{}, r.c.Status().Update(ctx, w)
}

// owners reads who owns each shard, by the pods' annotations.
func (f *fixture) owners(g Gomega) map[string]struct {
	pod   string
	fence int64
} {
	pods := &corev1.PodList{}
	g.Expect(admin.List(f.ctx, pods, client.InNamespace(f.ns))).To(Succeed())
	out := map[string]struct {
		pod   string
		fence int64
	}{}
	for _, p := range pods.Items {
		shards, err := record.ParseShards(p.Annotations[record.AnnotationShards])
		g.Expect(err).NotTo(HaveOccurred())
		for key, fenceValue := range shards {
			out[key] = struct {
				pod   string
				fence int64
			}{p.Name, fenceValue}
		}
	}
	return out
}

// expectReconciledByOwners waits until every Widget is labelled with its
// shard and records its shard's owner and fence, all shards owned, none
// by a pod in not.
func (f *fixture) expectReconciledByOwners(names []string, not ...string) {
	shardOf := fencedcontroller.ShardByName(shardCount)
	f.g.Eventually(func(g Gomega) {
		owners := f.owners(g)
		g.Expect(owners).To(HaveLen(shardCount))
		for _, o := range owners {
			g.Expect(not).NotTo(ContainElement(o.pod))
		}
		for _, name := range names {
			w := &examplesv1alpha1.Widget{}
			g.Expect(admin.Get(f.ctx, clientKey(f.ns, name), w)).To(Succeed())
			key, _ := shardOf(w)
			g.Expect(w.Labels).To(HaveKeyWithValue(fencedcontroller.LabelProtectedBy, shardedSet))
			g.Expect(w.Labels).To(HaveKeyWithValue(fencedcontroller.LabelShard, key))
			g.Expect(w.Status.Holder).To(Equal(owners[key].pod), "Widget %s of shard %s", name, key)
			g.Expect(w.Status.Fence).To(Equal(owners[key].fence), "Widget %s of shard %s", name, key)
		}
	}).WithTimeout(2 * timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestShardedManagers: three pods of a FencedShardSet share the Widgets of
// their namespace, each reconciled by its shard's owner with its shard's
// fence; when a pod is deleted its shards move and the new owners
// reconcile them; a pod whose shards file was not updated (as a paused
// kubelet sync, or a paused process) still believes it holds a shard that
// moved, and its write is rejected by the fencing webhook; and its client
// refuses, without sending it, a write of a Widget of a shard it does not
// hold.
func TestShardedManagers(t *testing.T) {
	f := newFixture(t)
	f.startOperator()
	f.createShardSet()
	pods := map[string]*shardedPod{}
	for _, name := range []string{"a", "b", "c"} {
		pods[name] = f.startShardedPod(name)
	}
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("w-%d", i)
		names = append(names, name)
		f.g.Expect(admin.Create(f.ctx, &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}})).To(Succeed())
	}
	// Every pod gets a shard: the set spreads 4 shards over 3 pods.
	f.g.Eventually(func(g Gomega) {
		held := map[string]bool{}
		for _, o := range f.owners(g) {
			held[o.pod] = true
		}
		g.Expect(held).To(HaveLen(3))
	}).WithTimeout(2 * timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	f.expectReconciledByOwners(names)

	// Pod c goes: its process ends with it, its shards move to a and b.
	pods["c"].stop()
	<-pods["c"].exited
	f.g.Expect(admin.Delete(f.ctx, pods["c"].pod, client.GracePeriodSeconds(0))).To(Succeed())
	f.expectReconciledByOwners(names, "c")

	// a's view of its shards stops (its shards file is no longer updated);
	// a stops being ready, so its shards move to b.
	a, b := pods["a"], pods["b"]
	before := f.owners(f.g)
	var moved, kept string // a Widget of a shard a held, and one of b's
	shardOf := fencedcontroller.ShardByName(shardCount)
	for _, name := range names {
		key, _ := shardOf(&examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name}})
		switch before[key].pod {
		case "a":
			moved = name
		case "b":
			kept = name
		}
	}
	f.g.Expect(moved).NotTo(BeEmpty(), "a Widget of a shard of pod a: %v", before)
	f.g.Expect(kept).NotTo(BeEmpty(), "a Widget of a shard of pod b: %v", before)
	a.paused.Store(true)
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, admin, a.pod)).To(Succeed())
	f.expectReconciledByOwners(names, "a", "c")

	// a's client still believes it holds the moved shard, with its old
	// fence: its write is sent, and the webhook rejects it.
	w := &examplesv1alpha1.Widget{}
	f.g.Expect(admin.Get(f.ctx, clientKey(f.ns, moved), w)).To(Succeed())
	key, _ := shardOf(w)
	f.g.Expect(a.mgr.Held()).To(HaveKey(key), "pod a's stale view")
	w.Status.Holder = "a"
	err := a.mgr.GetClient().Status().Update(f.ctx, w)
	f.g.Expect(err).To(HaveOccurred(), "the late write of pod a to Widget %s", moved)
	f.g.Expect(errors.Is(err, fencedcontroller.ErrShardNotHeld)).To(BeFalse(), "the write was sent: %v", err)
	f.g.Expect(err.Error()).To(ContainSubstring("denied the request"), "the fencing webhook rejected it")

	// A Widget of a shard a does not hold is refused by its client, unsent.
	w = &examplesv1alpha1.Widget{}
	f.g.Expect(admin.Get(f.ctx, clientKey(f.ns, kept), w)).To(Succeed())
	rv := w.ResourceVersion
	w.Spec.Message = "from a"
	err = a.mgr.GetClient().Update(f.ctx, w)
	f.g.Expect(errors.Is(err, fencedcontroller.ErrShardNotHeld)).To(BeTrue(), "%v", err)
	f.g.Expect(errors.Is(err, fence.ErrNotHolder)).To(BeTrue(), "%v", err)
	f.g.Expect(admin.Get(f.ctx, clientKey(f.ns, kept), w)).To(Succeed())
	f.g.Expect(w.ResourceVersion).To(Equal(rv), "nothing was written")

	// An object of no shard of the set (another namespace) is refused too.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "from-a"}}
	err = b.mgr.GetClient().Create(f.ctx, other)
	f.g.Expect(errors.Is(err, fencedcontroller.ErrShardNotHeld)).To(BeTrue(), "%v", err)
}

// createShardSet creates the set of the sharded tests: its shards move at
// once (takeover Immediate), to pods as soon as they are ready.
func (f *fixture) createShardSet() {
	f.g.Expect(admin.Create(f.ctx, &fencingv1alpha1.FencedShardSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: shardedSet},
		Spec: fencingv1alpha1.FencedShardSetSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "widget-sharded"}},
			Shards:   shardCount, LeaseDurationSeconds: 15, Takeover: fencingv1alpha1.TakeoverImmediate,
			Renewal: fencingv1alpha1.RenewalOperator, JoinDelaySeconds: ptr.To[int32](0), MaxMovesPerInterval: ptr.To[int32](0),
		},
	})).To(Succeed())
}

// TestShardedExampleController: the example controller in its sharded
// mode, three processes each acting with its own pod's bound token, gives
// each Widget a slot and records its shard's owner and fence.
func TestShardedExampleController(t *testing.T) {
	f := newFixture(t)
	f.startOperator()
	f.createShardSet()
	for _, name := range []string{"a", "b", "c"} {
		p := f.shardedPodFiles(name)
		f.startReplica(p.pod, "--fenced-shard-set="+shardedSet, fmt.Sprintf("--shards=%d", shardCount), "--shards-dir="+p.dir, "--resync=1h")
	}
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("w-%d", i)
		names = append(names, name)
		f.g.Expect(admin.Create(f.ctx, &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}})).To(Succeed())
	}
	f.expectReconciledByOwners(names)
	shardOf := fencedcontroller.ShardByName(shardCount)
	slots := map[string]bool{}
	for _, name := range names {
		w := &examplesv1alpha1.Widget{}
		f.g.Expect(admin.Get(f.ctx, clientKey(f.ns, name), w)).To(Succeed())
		f.g.Expect(w.Spec.Slot).NotTo(BeNil(), "Widget %s", name)
		key, _ := shardOf(w)
		slot := fmt.Sprintf("%s/%d", key, *w.Spec.Slot)
		f.g.Expect(slots).NotTo(HaveKey(slot), "Widget %s: slot %d is not unique in its shard %s", name, *w.Spec.Slot, key)
		slots[slot] = true
	}
}
