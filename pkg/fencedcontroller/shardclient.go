package fencedcontroller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// reader reads the stored object from the API server.
	reader client.Reader
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
	// APIReader reads from the API server, never from a cache (a
	// manager's GetAPIReader): a patch, a delete and a write of a
	// subresource are sent only when the stored object carries its shard's
	// labels, since the fencing webhook checks nothing of an object stored
	// without them. Nil reads through the client.
	APIReader client.Reader
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
//     caller gives it and as stored (read with APIReader), to carry them
//     already (a patch cannot be sure to add them to the stored object:
//     write the object with Update first);
//   - a write of an object of no shard, of a shard not held, outside the
//     set's namespace or cluster-scoped, or with another protector's
//     label, and DeleteAllOf,
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
	reader := o.APIReader
	if reader == nil {
		reader = c
	}
	return &fencedClient{inner: c, fieldManager: o.FieldManager,
		shards: &shardScope{set: o.Set, namespace: o.Namespace, shardOf: LabelledFirst(o.Set, o.ShardOf), held: o.Held, reader: reader}}, nil
}

// LabelledFirst returns the shard of an object labelled with a shard of
// the set (fencedlease.io/protected-by the set, fencedlease.io/shard its
// key) from that label, and of any other object from shardOf: an object
// never changes shards, whatever happens to what shardOf looks at (a
// label it reads, the shard count it hashes by), since the fencing webhook
// refuses any change of its shard label.
func LabelledFirst(set string, shardOf ShardOf) ShardOf {
	return func(obj client.Object) (string, bool) {
		if l := obj.GetLabels(); l[LabelProtectedBy] == set {
			if key, ok := l[LabelShard]; ok && key != "" {
				return key, true
			}
		}
		return shardOf(obj)
	}
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
//
// Without label (a patch, a delete, a write of a subresource), the object
// as stored must carry its shard's labels too, read from the API server:
// the caller's copy may carry labels that the stored object lacks (an
// Update that added them and failed), and the fencing webhook checks
// nothing of an object stored without them. Once stored, the labels stay:
// only the operator and break-glass users may remove or change them.
func (c *fencedClient) scoped(ctx context.Context, verb string, obj client.Object, label bool) (*fencedClient, error) {
	s := c.shards
	if s == nil {
		return c, nil
	}
	if c.isEvent(obj) {
		return &fencedClient{inner: c.inner, fieldManager: c.fieldManager, shards: s, unfenced: true}, nil
	}
	what := c.describe(obj)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%s %s refused before it was sent: %w: %w: %s", verb, what, fence.ErrNotHolder, ErrShardNotHeld, fmt.Sprintf(format, args...))
	}
	if namespaced, err := c.inner.IsObjectNamespaced(obj); err != nil || !namespaced {
		return nil, refuse("FencedShardSet %s/%s protects only namespaced objects of namespace %s (%v)", s.namespace, s.set, s.namespace, err)
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
	} else {
		if labels[LabelProtectedBy] != s.set || labels[LabelShard] != key {
			return nil, refuse("it is not labelled %s=%s, %s=%s: write it with Create or Update first, which label it",
				LabelProtectedBy, s.set, LabelShard, key)
		}
		if err := s.storedLabelled(ctx, obj, key); err != nil {
			return nil, refuse("%v", err)
		}
	}
	return &fencedClient{inner: c.inner, grants: g, fieldManager: c.fieldManager, shards: s}, nil
}

// storedLabelled reads obj as stored, from the API server, and says why it
// may not be written without a label of its own: it is stored without its
// shard's labels. An object not stored yet is for the API server to judge
// (a patch of it fails; an apply creates it with the labels it carries).
func (s *shardScope) storedLabelled(ctx context.Context, obj client.Object, key string) error {
	stored, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("cannot copy %T to read it as stored", obj)
	}
	switch err := s.reader.Get(ctx, client.ObjectKeyFromObject(obj), stored); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read it as stored, to check its labels: %w", err)
	}
	if l := stored.GetLabels(); l[LabelProtectedBy] != s.set || l[LabelShard] != key {
		return fmt.Errorf("it is stored without the labels %s=%s, %s=%s (its copy has them): the fencing webhook would not check this write; write the object with Update first, which labels it",
			LabelProtectedBy, s.set, LabelShard, key)
	}
	return nil
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
// is no state a shard's owner keeps. The kind is the one the client writes
// obj as: for a typed object the scheme's, whatever its TypeMeta says.
func (c *fencedClient) isEvent(obj client.Object) bool {
	gvk, err := c.inner.GroupVersionKindFor(obj)
	return err == nil && gvk.Kind == "Event" && (gvk.Group == "" || gvk.Group == eventsv1.GroupName)
}
