//go:build bench

package bench_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// world is the namespace every group runs in, with the kubelet's parts the
// groups need: node heartbeats, and the pods' token files, rewritten at once
// when the operator's annotations on a pod change (the kubelet's own delay,
// about a second and up to its sync period, is not simulated), each followed
// by a pkg/fence Watcher: the pod's process.
type world struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	ns  string
	rec *recorder

	mu    sync.Mutex
	procs map[string]*process
	beats map[string]context.CancelFunc

	// steady holds every fencedlease group, once its first grant is
	// published and its standby marked, until all are: the run's
	// measures of the operator's grant reconciles then count takeovers
	// only.
	steady barrier
}

// barrier lets its members go on together once all have arrived.
type barrier struct {
	arrived sync.WaitGroup
	start   chan struct{}
}

// arrive counts a member in and waits until the barrier opens.
func (b *barrier) arrive() {
	b.arrived.Done()
	<-b.start
}

// process is a pod's token files and the Watcher that reads them.
type process struct {
	files *fencetest.KubeletWriter
	watch *fence.Watcher
	shown string
}

func newWorld(ctx context.Context, t *testing.T, c client.Client, ns string) *world {
	w := &world{t: t, ctx: ctx, c: c, ns: ns, rec: newRecorder(ctx, t, ns), procs: map[string]*process{}, beats: map[string]context.CancelFunc{},
		steady: barrier{start: make(chan struct{})}}
	w.rec.onPod = w.syncFiles
	return w
}

// startPod creates a pod ready since readySince on node, with its process.
func (w *world) startPod(name, lease, node string, labels map[string]string, readySince time.Time) error {
	files, err := fencetest.NewKubeletWriter(filepath.Join(w.t.TempDir(), "fencedlease"))
	if err != nil {
		return err
	}
	if err := files.Standby(lease); err != nil {
		return err
	}
	// One inotify instance per Watcher, and a user gets 128 on this
	// machine: the Watchers beyond that poll, every 50 ms instead of the
	// default 5 s, so that "knows" is late by at most that much for them.
	watch, err := fence.New(files.Dir(), fence.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.procs[name] = &process{files: files, watch: watch}
	w.mu.Unlock()
	go func() {
		for {
			hctx, tok, err := watch.HolderContext(w.ctx)
			if err != nil {
				return // closed: the pod is gone
			}
			w.rec.learned(name, tok.Fence, time.Now())
			<-hctx.Done()
		}
	}()
	pod, err := testenv.CreatePod(w.ctx, w.c, testenv.Pod{Namespace: w.ns, Name: name, Labels: labels, Node: node})
	if err != nil {
		return err
	}
	return testenv.SetReady(w.ctx, w.c, pod, readySince.Truncate(time.Second))
}

// stopProcess ends the pod's process (its pod is gone).
func (w *world) stopProcess(name string) {
	w.mu.Lock()
	p := w.procs[name]
	delete(w.procs, name)
	w.mu.Unlock()
	if p != nil {
		_ = p.watch.Close()
	}
}

// syncFiles rewrites a pod's token files when the operator's annotations on
// it change, with the kubelet's atomic writer.
func (w *world) syncFiles(pod *corev1.Pod) {
	role, f, lease := pod.Annotations[fencingv1alpha1.AnnotationRole], pod.Annotations[fencingv1alpha1.AnnotationFence], pod.Annotations[fencingv1alpha1.AnnotationLease]
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[pod.Name]
	if p == nil || role == "" || p.shown == role+"/"+f+"/"+lease {
		return
	}
	if err := p.files.WriteToken(role, f, lease); err != nil {
		w.t.Errorf("token files of pod %s: %v", pod.Name, err)
		return
	}
	p.shown = role + "/" + f + "/" + lease
}

// heartbeat starts (or restarts) the kubelet heartbeats of a node.
func (w *world) heartbeat(node string) error {
	ctx, cancel := context.WithCancel(w.ctx)
	var err error
	for range 10 { // the first heartbeat may conflict with the node lifecycle controller's own update
		if err = testenv.Kubelet(ctx, w.c, node, time.Second); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		cancel()
		return err
	}
	w.mu.Lock()
	w.beats[node] = cancel
	w.mu.Unlock()
	return nil
}

// stopHeartbeat stops a node's kubelet: the node lifecycle controller marks
// it lost after its grace period.
func (w *world) stopHeartbeat(node string) {
	w.mu.Lock()
	cancel := w.beats[node]
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// nodeHealthy says whether the node is Ready and carries neither the
// unreachable nor the not-ready taint.
func (w *world) nodeHealthy(node string) (bool, error) {
	n := &corev1.Node{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: node}, n); err != nil {
		return false, fmt.Errorf("get node %s: %w", node, err)
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return false, nil
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}
