package fencedcontroller

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// ShardByName puts an object in one of n shards, keyed "0" to "n-1" as a
// FencedShardSet with spec.shards n has them, by the FNV-1a hash of its
// name.
func ShardByName(n int) ShardOf {
	return func(obj client.Object) (string, bool) {
		if n <= 0 {
			return "", false
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(obj.GetName()))
		return strconv.Itoa(int(h.Sum32() % uint32(n))), true
	}
}

// ShardByLabel puts an object in the shard its label names (a tenant, a
// partition: spec.keys of the set); an object without it is in none.
func ShardByLabel(label string) ShardOf {
	return func(obj client.Object) (string, bool) {
		key := obj.GetLabels()[label]
		return key, key != ""
	}
}

// Predicate passes the events of objects of the shards the pod holds.
func (m *ShardedManager) Predicate() predicate.Predicate {
	return predicate.NewPredicateFuncs(m.Holds)
}

// Gained is a source of the objects of kind obj (a prototype) of each
// shard as the pod gains it, for a controller to reconcile them: their
// own events were filtered out while another pod held the shard. It must
// be made before the manager starts.
func (m *ShardedManager) Gained(obj client.Object) (source.Source, error) {
	gvk, err := apiutil.GVKForObject(obj, m.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("source of the %T of gained shards: %w", obj, err)
	}
	list, err := m.GetScheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, fmt.Errorf("source of the %s of gained shards: %w", gvk.Kind, err)
	}
	l, ok := list.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("source of the %s of gained shards: %T is not a list", gvk.Kind, list)
	}
	s := &gainedSource{m: m, kind: gvk.Kind, list: l, events: make(chan event.GenericEvent, 64)}
	m.feed.sources = append(m.feed.sources, s)
	return source.Channel(s.events, &handler.EnqueueRequestForObject{}), nil
}

// gainedSource sends the objects of a kind of each shard gained.
type gainedSource struct {
	m      *ShardedManager
	kind   string
	list   client.ObjectList
	events chan event.GenericEvent
}

// gained sends the objects of shard key, as the cache has them.
func (s *gainedSource) gained(ctx context.Context, key string) {
	list, ok := s.list.DeepCopyObject().(client.ObjectList)
	if !ok {
		return
	}
	if err := s.m.GetCache().List(ctx, list, client.InNamespace(s.m.opts.Namespace)); err != nil {
		s.m.log.Error(err, "List the objects of a gained shard", "kind", s.kind, "shard", key)
		return
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		obj, ok := o.(client.Object)
		if !ok {
			return nil
		}
		if k, ok := s.m.opts.ShardOf(obj); !ok || k != key {
			return nil
		}
		select {
		case s.events <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
}

// Reconciler wraps r, a reconciler of kind obj (a prototype): a request
// for an object of a shard the pod does not hold does nothing; r gets the
// others, with the shard's fence in the context (FenceFromContext). An
// object gone from the cache whose shard ShardOf cannot tell from its
// namespace and name alone goes to r.
func (m *ShardedManager) Reconciler(obj client.Object, r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		o, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return reconcile.Result{}, fmt.Errorf("reconcile %s: cannot copy %T", req, obj)
		}
		err := m.GetCache().Get(ctx, req.NamespacedName, o)
		switch {
		case apierrors.IsNotFound(err):
			o = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("reconcile %s: %w", req, err)
		}
		key, known := m.opts.ShardOf(o)
		if !known && err != nil {
			return r.Reconcile(ctx, req)
		}
		fenceValue, held := m.watcher.Current()[key]
		if !known || !held || req.Namespace != m.opts.Namespace {
			m.log.V(1).Info("Not reconciled: its shard is not held", "object", klog.KRef(req.Namespace, req.Name), "shard", key)
			return reconcile.Result{}, nil
		}
		return r.Reconcile(context.WithValue(ctx, fenceKey{}, fenceValue), req)
	})
}

// Controller registers a controller of kind obj named name that
// reconciles, with r, the objects of the shards the pod holds: their
// events that preds pass (Predicate), and all of a shard's as the pod
// gains it (Gained), each through Reconciler.
func (m *ShardedManager) Controller(name string, obj client.Object, r reconcile.Reconciler, preds ...predicate.Predicate) error {
	gained, err := m.Gained(obj)
	if err != nil {
		return err
	}
	return builder.ControllerManagedBy(m).Named(name).
		For(obj, builder.WithPredicates(append([]predicate.Predicate{m.Predicate()}, preds...)...)).
		WatchesRawSource(gained).
		Complete(m.Reconciler(obj, r))
}
