package fencedcontroller

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// LabelShard is the label that, beside LabelProtectedBy, names the shard of the
// FencedShardSet named by LabelProtectedBy that protects an object: only the
// shard's current owner pod may write it, with the shard's fence.
const LabelShard = "fencedlease.io/shard"

// ErrShardNotHeld is wrapped, beside fence.ErrNotHolder, in the error of a
// write that the client of a sharded manager refuses before sending it:
// the object belongs to no shard, or to a shard this pod does not hold by
// its latest reading of its shards file, or it is not labelled with its
// shard.
var ErrShardNotHeld = errors.New("shard not held")

// ShardOf says which shard of a FencedShardSet an object belongs to: its
// key, and false when it belongs to none.
type ShardOf func(obj client.Object) (string, bool)

// shardScope is what makes a fencedClient the client of a sharded
// manager: every write is scoped to the shard of its object.
type shardScope struct {
	// set is the FencedShardSet; namespace its namespace, the only one
	// whose objects it can protect (the fencing webhook looks the set up
	// in the namespace of the object it protects).
	set, namespace string
	shardOf        ShardOf
	// held is the pod's shards by its latest reading of its shards file.
	held func() fence.Shards
}

// ClientShardOptions configure NewShardedClient.
type ClientShardOptions struct {
	// Set is the FencedShardSet, and Namespace its namespace.
	Set, Namespace string
	// ShardOf gives each object's shard.
	ShardOf ShardOf
	// Held returns the shards the pod holds now (a fence.ShardWatcher's
	// Current). It is asked right before every write.
	Held func() fence.Shards
	// FieldManager is as in ClientOptions.
	FieldManager string
}

// NewShardedClient returns a client that writes through c only objects of
// the shards the pod holds, each stamped with its own shard's fence as
// NewClient stamps a grant's, and labelled with its shard so that the
// fencing webhook checks that fence:
//
//   - Create, Update and Apply add the labels LabelProtectedBy (the set)
//     and LabelShard (the object's shard) to the object;
//   - Patch, Delete and writes of a subresource need the object, as the
//     caller gives it, to carry them already (a patch cannot be sure to
//     add them to the stored object: write the object with Update first);
//   - a write of an object of no shard, of a shard not held, outside the
//     set's namespace, or with another protector's label, and DeleteAllOf,
//     is refused without being sent: the error wraps fence.ErrNotHolder and
//     ErrShardNotHeld and names the object;
//   - Events (core and events.k8s.io) are not state: they are sent as they
//     are, without any check.
//
// So every write it sends is to an object the webhook protects by the
// object's shard, and a write sent after the shard moved (a paused
// process, a shards file not yet updated) carries the old fence and is
// rejected by the webhook. Reads go to c as they are.
func NewShardedClient(c client.Client, o ClientShardOptions) (client.Client, error) {
	switch {
	case o.Set == "" || o.Namespace == "":
		return nil, errors.New("sharded client: name the FencedShardSet and its namespace")
	case o.ShardOf == nil:
		return nil, fmt.Errorf("sharded client of FencedShardSet %s/%s: ShardOf is not set", o.Namespace, o.Set)
	case o.Held == nil:
		return nil, fmt.Errorf("sharded client of FencedShardSet %s/%s: Held is not set", o.Namespace, o.Set)
	}
	return &fencedClient{inner: c, fieldManager: o.FieldManager,
		shards: &shardScope{set: o.Set, namespace: o.Namespace, shardOf: o.ShardOf, held: o.Held}}, nil
}

// protects says whether a write of an object with these labels is
// stamped: on a sharded client, every write this client sends is.
func (c *fencedClient) protects(labels map[string]string) bool {
	return c.shards != nil || protected(labels)
}

// scoped returns the client to make one write of obj with. Unsharded, c
// itself. Sharded, a copy whose grant is obj's shard's (asked again right
// before each send), or the error of a refused write: see
// NewShardedClient. With label, obj gets its shard's labels.
func (c *fencedClient) scoped(verb string, obj client.Object, label bool) (*fencedClient, error) {
	s := c.shards
	if s == nil {
		return c, nil
	}
	if isEvent(obj) {
		return &fencedClient{inner: c.inner, fieldManager: c.fieldManager, shards: s, unfenced: true}, nil
	}
	what := c.describe(obj)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%s %s refused before it was sent: %w: %w: %s", verb, what, fence.ErrNotHolder, ErrShardNotHeld, fmt.Sprintf(format, args...))
	}
	if obj.GetNamespace() != s.namespace {
		return nil, refuse("FencedShardSet %s/%s protects only objects of namespace %s", s.namespace, s.set, s.namespace)
	}
	key, ok := s.shardOf(obj)
	if !ok {
		return nil, refuse("it belongs to no shard of FencedShardSet %s/%s", s.namespace, s.set)
	}
	g := shardGrant{scope: s, key: key}
	if _, ok := g.Current(); !ok {
		return nil, refuse("%s", g.notHeld())
	}
	labels := obj.GetLabels()
	if by, ok := labels[LabelProtectedBy]; ok && by != s.set {
		return nil, refuse("it is protected by %s, not by FencedShardSet %s", by, s.set)
	}
	if label {
		l := maps.Clone(labels)
		if l == nil {
			l = map[string]string{}
		}
		l[LabelProtectedBy], l[LabelShard] = s.set, key
		obj.SetLabels(l)
	} else if labels[LabelProtectedBy] != s.set || labels[LabelShard] != key {
		return nil, refuse("it is not labelled %s=%s, %s=%s: write it with Create or Update first, which label it",
			LabelProtectedBy, s.set, LabelShard, key)
	}
	return &fencedClient{inner: c.inner, grants: g, fieldManager: c.fieldManager, shards: s}, nil
}

// shardGrant is the grant of one shard, as the pod's latest reading of its
// shards file has it.
type shardGrant struct {
	scope *shardScope
	key   string
}

// Current returns the shard's grant, if the pod holds the shard now.
func (g shardGrant) Current() (fence.Grant, bool) {
	f, ok := g.scope.held()[g.key]
	return fence.Grant{Lease: g.scope.set, Fence: f}, ok && f > 0
}

func (g shardGrant) notHeld() string {
	held := slices.Sorted(maps.Keys(g.scope.held()))
	return fmt.Sprintf("shard %q of FencedShardSet %s/%s is not held by this pod (it holds %q)", g.key, g.scope.namespace, g.scope.set, held)
}

// isEvent says whether obj is an Event, which records what happened and
// is no state a shard's owner keeps.
func isEvent(obj client.Object) bool {
	switch obj.(type) {
	case *corev1.Event, *eventsv1.Event:
		return true
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return gvk.Kind == "Event" && (gvk.Group == "" || gvk.Group == eventsv1.GroupName)
}
