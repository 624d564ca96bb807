package testenv

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
)

// Lag wraps the client of an operator so that its reads of a kind can be
// frozen: while frozen, Get and List serve the objects of that kind as the
// informer cache had them when Freeze was called, as an informer that stops
// receiving events would. Writes go through unchanged.
type Lag struct {
	client.Client
	mu     sync.Mutex
	frozen map[schema.GroupVersionKind][]client.Object
}

// NewLag wraps c.
func NewLag(c client.Client) *Lag {
	return &Lag{Client: c, frozen: map[schema.GroupVersionKind][]client.Object{}}
}

// Freeze takes a snapshot of every object of the list's kind that the
// wrapped client sees now, and serves it from then on.
func (l *Lag) Freeze(ctx context.Context, list client.ObjectList) error {
	if err := l.Client.List(ctx, list); err != nil {
		return fmt.Errorf("list to freeze: %w", err)
	}
	gvk, err := l.itemKind(list)
	if err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	snap := make([]client.Object, 0, len(items))
	for _, o := range items {
		snap = append(snap, o.DeepCopyObject().(client.Object))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frozen[gvk] = snap
	return nil
}

// Thaw lets reads of the list's kind through again.
func (l *Lag) Thaw(list client.ObjectList) {
	gvk, err := l.itemKind(list)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.frozen, gvk)
}

func (l *Lag) itemKind(list client.ObjectList) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(list, l.Scheme())
	if err != nil {
		return gvk, err
	}
	gvk.Kind = gvk.Kind[:len(gvk.Kind)-len("List")]
	return gvk, nil
}

func (l *Lag) snapshot(obj runtime.Object) ([]client.Object, bool) {
	gvk, err := apiutil.GVKForObject(obj, l.Scheme())
	if err != nil {
		return nil, false
	}
	if meta.IsListType(obj) {
		gvk.Kind = gvk.Kind[:len(gvk.Kind)-len("List")]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	snap, ok := l.frozen[gvk]
	return snap, ok
}

// Get serves a frozen kind from its snapshot.
func (l *Lag) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	snap, ok := l.snapshot(obj)
	if !ok {
		return l.Client.Get(ctx, key, obj, opts...)
	}
	for _, o := range snap {
		if o.GetNamespace() == key.Namespace && o.GetName() == key.Name {
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
			return nil
		}
	}
	gvk, _ := apiutil.GVKForObject(obj, l.Scheme())
	return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, key.Name)
}

// List serves a frozen kind from its snapshot, with the namespace, label
// selector and the controller's field indexes applied as the cache would.
func (l *Lag) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	snap, ok := l.snapshot(list)
	if !ok {
		return l.Client.List(ctx, list, opts...)
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	var items []runtime.Object
	for _, o := range snap {
		if lo.Namespace != "" && o.GetNamespace() != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		if !matchesIndexes(o, lo) {
			continue
		}
		items = append(items, o.DeepCopyObject())
	}
	return meta.SetList(list, items)
}

// matchesIndexes applies a field selector through the controller's indexes.
func matchesIndexes(o client.Object, lo *client.ListOptions) bool {
	if lo.FieldSelector == nil || lo.FieldSelector.Empty() {
		return true
	}
	for _, r := range lo.FieldSelector.Requirements() {
		found := false
		for _, ix := range fencedlease.Indexes() {
			if ix.Field != r.Field || reflect.TypeOf(ix.Object) != reflect.TypeOf(o) {
				continue
			}
			for _, v := range ix.Extract(o) {
				found = found || v == r.Value
			}
		}
		if !found {
			return false
		}
	}
	return true
}
