package main

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/pkg/fence"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// lateWriter writes the Widgets on after the manager stopped, as a replica
// that has not noticed that it lost its grant or election would: its
// allocator hands out slots from its own stale view, and it writes the
// status as if it still held.
type lateWriter struct {
	log    logr.Logger
	reader client.Reader // reads from the API server, not a cache
	writer client.Client // the writes, as the controller made them
	ns     string
	pod    string
	fence  int64
}

// staleGrant is the grant the replica held last, as a Grants that still
// holds it: the fencing client's own check, which a replica paused between
// the check and the write gets past, is out of the way, so that every late
// write reaches the API server and its fencing webhook.
type staleGrant fence.Grant

func (g staleGrant) Current() (fence.Grant, bool) { return fence.Grant(g), true }

// run writes every Widget's spec and status, again and again, for d: by
// turns with an update and with a merge patch.
func (l *lateWriter) run(ctx context.Context, d time.Duration) {
	l.log.Info("Writing on as if this replica still led", "for", d, "fence", l.fence)
	end := time.Now().Add(d)
	for n := 0; time.Now().Before(end) && ctx.Err() == nil; n++ {
		var list examplesv1alpha1.WidgetList
		if err := l.reader.List(ctx, &list, client.InNamespace(l.ns)); err != nil {
			l.log.Error(err, "List Widgets")
		}
		for i := range list.Items {
			name := client.ObjectKeyFromObject(&list.Items[i])
			l.writeSpec(ctx, name, n)
			l.writeStatus(ctx, name, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *lateWriter) get(ctx context.Context, key client.ObjectKey) (*examplesv1alpha1.Widget, bool) {
	w := &examplesv1alpha1.Widget{}
	if err := l.reader.Get(ctx, key, w); err != nil {
		l.log.Error(err, "Get Widget", "widget", key)
		return nil, false
	}
	return w, true
}

// writeSpec gives the Widget a slot from the stale view: 1000 + n.
func (l *lateWriter) writeSpec(ctx context.Context, key client.ObjectKey, n int) {
	w, ok := l.get(ctx, key)
	if !ok {
		return
	}
	orig := w.DeepCopy()
	w.Spec.Slot = ptr.To(int32(1000 + n))
	sent := time.Now()
	if n%2 == 0 {
		logWrite(l.log, w, "spec", "update", l.fence, true, sent, l.writer.Update(ctx, w))
		return
	}
	logWrite(l.log, w, "spec", "patch", l.fence, true, sent, l.writer.Patch(ctx, w, client.MergeFrom(orig)))
}

// writeStatus writes the status as this replica's.
func (l *lateWriter) writeStatus(ctx context.Context, key client.ObjectKey, n int) {
	w, ok := l.get(ctx, key)
	if !ok {
		return
	}
	orig := w.DeepCopy()
	w.Status.Holder = l.pod
	w.Status.Fence = l.fence
	w.Status.Reconciles++
	w.Status.ReconcileTime = ptr.To(metav1.Now())
	sent := time.Now()
	if n%2 == 0 {
		logWrite(l.log, w, "status", "update", l.fence, true, sent, l.writer.Status().Update(ctx, w))
		return
	}
	logWrite(l.log, w, "status", "patch", l.fence, true, sent, l.writer.Status().Patch(ctx, w, client.MergeFrom(orig)))
}
