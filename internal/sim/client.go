package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// replicaClient is what one operator replica's reconciler uses as its
// client: reads come from that replica's informer caches, each serving the
// store as of its own revision; writes go to the simulated API server. Every
// write is a scheduling point: the reconcile blocks until the scheduler runs
// it, so anything may happen between what it read and what it writes. Cache
// reads are not: a cache only moves when the scheduler lets it catch up.
type replicaClient struct {
	client.Client // not implemented: calling anything else panics
	sim           *Sim
	rep           *replica
}

var _ client.Client = &replicaClient{}

func (c *replicaClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	kind, err := c.sim.store.kindOf(obj)
	if err != nil {
		return err
	}
	if kind == "FencedShardSet" {
		c.rep.setReads[key.Name] = c.rep.view(kind)
		if set, _ := c.sim.store.at(objKey{kind: kind, namespace: key.Namespace, name: key.Name}, c.rep.view(kind)).(*fencingv1alpha1.FencedShardSet); set != nil {
			c.sim.tracef("  r%d reads set %s at rv=%s: takeover %s", c.rep.id, key.Name, set.ResourceVersion, set.Spec.Takeover)
		}
	}
	return c.sim.store.get(c.rep.view(kind), key, obj)
}

func (c *replicaClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	kind, err := c.sim.store.kindOf(list)
	if err != nil {
		return err
	}
	return c.sim.store.list(c.rep.view(kind), list, opts...)
}

func (c *replicaClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.sim.write(ctx, c.rep, "create", obj, func() error {
		if obj.GetUID() == "" {
			obj.SetUID(c.sim.store.newUID())
		}
		obj.SetCreationTimestamp(metav1.NewTime(c.sim.clock.Now()))
		return c.sim.store.head.Create(context.Background(), obj, opts...)
	})
}

func (c *replicaClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.sim.write(ctx, c.rep, "update", obj, func() error {
		return c.sim.store.head.Update(context.Background(), obj, opts...)
	})
}

func (c *replicaClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.sim.write(ctx, c.rep, "patch", obj, func() error {
		if err := c.sim.store.keepsUID(obj, patchedUID(obj, patch)); err != nil {
			return err
		}
		return c.sim.store.head.Patch(context.Background(), obj, patch, opts...)
	})
}

func (c *replicaClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.sim.write(ctx, c.rep, "delete", obj, func() error {
		if err := c.sim.store.deletesUID(obj, opts); err != nil {
			return err
		}
		return c.sim.store.head.Delete(context.Background(), obj, opts...)
	})
}

func (c *replicaClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c *replicaClient) SubResource(sub string) client.SubResourceClient {
	return &subClient{c: c, sub: sub}
}

func (c *replicaClient) Scheme() *runtime.Scheme     { return c.sim.store.scheme }
func (c *replicaClient) RESTMapper() meta.RESTMapper { return c.sim.store.head.RESTMapper() }
func (c *replicaClient) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return c.sim.store.head.GroupVersionKindFor(obj)
}
func (c *replicaClient) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	return c.sim.store.head.IsObjectNamespaced(obj)
}

// subClient writes a subresource (status) of an object.
type subClient struct {
	client.SubResourceClient // not implemented
	c                        *replicaClient
	sub                      string
}

func (s *subClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.sim.write(ctx, s.c.rep, s.sub+" update", obj, func() error {
		return s.c.sim.store.head.SubResource(s.sub).Update(context.Background(), obj, opts...)
	})
}

func (s *subClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.sim.write(ctx, s.c.rep, s.sub+" patch", obj, func() error {
		return s.c.sim.store.head.SubResource(s.sub).Patch(context.Background(), obj, patch, opts...)
	})
}

// liveReader reads from the API server itself, as a reconciler's APIReader
// does: always the newest state.
type liveReader struct {
	sim *Sim
	rep *replica
}

func (l *liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	kind, err := l.sim.store.kindOf(obj)
	if err != nil {
		return err
	}
	return l.sim.do(ctx, fmt.Sprintf("r%d live get %s %s", l.rep.id, kind, key), false, func() error {
		return l.sim.store.get(l.sim.store.rev, key, obj)
	})
}

func (l *liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	kind, err := l.sim.store.kindOf(list)
	if err != nil {
		return err
	}
	return l.sim.do(ctx, fmt.Sprintf("r%d live list %s", l.rep.id, kind), false, func() error {
		return l.sim.store.list(l.sim.store.rev, list, opts...)
	})
}

// write runs one write of a replica against the API server, records what it
// changed and checks the invariants. A lost reply applies the write and then
// answers the caller with a timeout, leaving its object as it was: the
// caller cannot tell whether its write happened.
func (s *Sim) write(ctx context.Context, rep *replica, verb string, obj client.Object, op func() error) error {
	key, err := s.store.keyOf(obj)
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("r%d %s %s", rep.id, verb, key)
	return s.do(ctx, desc, true, func() error {
		before := obj.DeepCopyObject()
		if s.chance(s.cfg.LostRequests) {
			s.tracef("  lost request: %s was never applied", desc)
			return apierrors.NewTimeoutError("the request was lost (simulated)", 1)
		}
		opErr := op()
		stored, err := s.store.record(key)
		if err != nil {
			return err
		}
		if opErr == nil {
			s.tracef("  => %s", summary(stored))
		}
		if opErr == nil {
			s.checker.afterWrite(s, key, fmt.Sprintf("r%d", rep.id))
		}
		if opErr == nil && s.chance(s.cfg.LostReplies) {
			s.tracef("  lost reply: %s was applied", desc)
			s.stats.LostReplies++
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(before).Elem())
			return apierrors.NewTimeoutError("the reply was lost (simulated)", 1)
		}
		if opErr == nil && key.kind == "FencedShardSet" && stored != nil {
			// The reply is the set as stored now, spec included: the
			// reconcile goes on with it.
			rep.setReads[key.name] = s.store.rev
			s.tracef("  r%d reads set %s in the reply", rep.id, key.name)
		}
		return opErr
	})
}

// summary describes the state of an object that matters to the lock, for
// traces.
func summary(obj client.Object) string {
	switch o := obj.(type) {
	case nil:
		return "deleted"
	case *corev1.Pod:
		if shards, ok := o.Annotations[record.AnnotationShards]; ok || o.Labels[record.LabelShardSet] != "" {
			return fmt.Sprintf("rv=%s set=%q shards=%s mark=%q", o.ResourceVersion, o.Labels[record.LabelShardSet], shards, o.Annotations[record.AnnotationShardsMark])
		}
		return fmt.Sprintf("rv=%s label=%q role=%q fence=%q grant=%q", o.ResourceVersion, o.Labels[fencingv1alpha1.LabelLease],
			o.Annotations[fencingv1alpha1.AnnotationRole], o.Annotations[fencingv1alpha1.AnnotationFence], o.Annotations[fencingv1alpha1.AnnotationGrant])
	case *coordinationv1.Lease:
		if set := o.Labels[record.LabelShardSet]; set != "" {
			rec := record.ParseLease(o.Annotations)
			return fmt.Sprintf("rv=%s state=%q holder=%s uid=%s fence=%d previous=%s", o.ResourceVersion, rec.State, ptr.Deref(o.Spec.HolderIdentity, ""), rec.HolderUID, rec.Fence,
				o.Annotations[record.LeasePreviousHolders])
		}
		return fmt.Sprintf("rv=%s state=%q holder=%s fence=%q transitions=%d", o.ResourceVersion, o.Annotations[fencingv1alpha1.LeaseAnnotationState],
			ptr.Deref(o.Spec.HolderIdentity, ""), o.Annotations[fencingv1alpha1.AnnotationFence], ptr.Deref(o.Spec.LeaseTransitions, 0))
	case *fencingv1alpha1.FencedLease:
		h := ""
		if o.Status.Holder != nil {
			h = o.Status.Holder.PodName
		}
		return fmt.Sprintf("rv=%s holder=%q fence=%d transitions=%d leaseRV=%s", o.ResourceVersion, h, o.Status.Fence, o.Status.Transitions, o.Status.LeaseResourceVersion)
	}
	return "rv=" + obj.GetResourceVersion()
}

// keepsUID refuses a patch that would change the UID of the stored object,
// as the API server does (metadata.uid is immutable): a patch that names the
// UID of an object deleted since, on the one created under its name, fails.
func (s *store) keepsUID(obj client.Object, uid types.UID) error {
	if uid == "" {
		return nil
	}
	if stored, found := s.storedUID(obj); !found || stored == uid {
		return nil // a missing object is the patch's own error
	}
	gvk, _ := apiutil.GVKForObject(obj, s.scheme)
	return apierrors.NewInvalid(gvk.GroupKind(), obj.GetName(), field.ErrorList{
		field.Invalid(field.NewPath("metadata", "uid"), uid, "field is immutable")})
}

// patchedUID is the UID a merge patch sets, if it names one and no
// resourceVersion: a patch on a stale resourceVersion fails its optimistic
// lock first, as an update on one does (the fake client's own check).
func patchedUID(obj client.Object, patch client.Patch) types.UID {
	if patch.Type() != types.MergePatchType {
		return ""
	}
	data, err := patch.Data(obj)
	if err != nil {
		return ""
	}
	var p struct {
		Metadata struct {
			UID             types.UID `json:"uid"`
			ResourceVersion string    `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(data, &p) != nil || p.Metadata.ResourceVersion != "" {
		return ""
	}
	return p.Metadata.UID
}

// deletesUID checks a delete's UID precondition, which the fake client
// ignores (it checks the resourceVersion one only), as the API server does:
// a conflict when the object of that name is another one now.
func (s *store) deletesUID(obj client.Object, opts []client.DeleteOption) error {
	o := client.DeleteOptions{}
	o.ApplyOptions(opts)
	if o.Preconditions == nil || o.Preconditions.UID == nil {
		return nil
	}
	stored, found := s.storedUID(obj)
	if !found || stored == *o.Preconditions.UID {
		return nil // a missing object is the delete's own error
	}
	gvk, _ := apiutil.GVKForObject(obj, s.scheme)
	return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName(),
		fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *o.Preconditions.UID, stored))
}

// storedUID is the UID of the object stored under obj's name, if there is one.
func (s *store) storedUID(obj client.Object) (types.UID, bool) {
	stored := obj.DeepCopyObject().(client.Object)
	if err := s.head.Get(context.Background(), client.ObjectKeyFromObject(obj), stored); err != nil {
		return "", false
	}
	return stored.GetUID(), true
}
