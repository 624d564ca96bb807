package fencedcontroller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/apistatus"
	"github.com/fencedlease/fencedlease/pkg/fence"
)

// Grants says which grant of a FencedLease this process may write under,
// right now. A *fence.Session is one; the manager of NewManager gives its
// client one that holds only the grant its controllers were started under.
type Grants interface {
	// Current returns the grant held now; false when there is none. It is
	// asked right before every write, so it must judge the grant's deadline
	// against the clock itself (as Session.Current does), not rely on a
	// timer that a paused process fires late.
	Current() (fence.Grant, bool)
}

// reasoner is a Grants that can say why it holds no grant, for the error.
type reasoner interface {
	notHeld() string
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// FieldManager is the field manager of a subresource write that names
	// none (client.FieldOwner): such a write carries the fence in its field
	// manager, which must then be set. NewManager sets it from the
	// manager's user agent, as the API server would have named the writer.
	FieldManager string
}

// NewClient returns a client that writes through c only while g holds a
// grant, and stamps that grant's fence where the fencing webhook checks
// one: on objects that carry the protected-by label (LabelProtectedBy) as
// the caller gives them, and on no others.
//
//   - Create, Update, Patch and Apply of a protected object set the
//     annotation fencedlease.io/fence to the fence (for a patch, in the
//     patch itself; see stampPatchData for each patch type); an apply that
//     conflicts only with this client's stamps of another grant is sent
//     again with force (ownConflict);
//   - writes of a subresource (Status(), SubResource("scale"), ...) of a
//     protected object set the field manager to
//     "<manager>;fencedlease.io/fence=<N>" (FieldManager), <manager> being
//     the write's own field manager or o.FieldManager;
//   - Delete of a protected object writes the fence on it first, then
//     deletes the version that write made (the fencing webhook admits a
//     delete from the current holder pod only, of an object carrying its
//     current fence); DeleteAllOf carries no fence (a delete cannot), so it
//     deletes only the objects last written with the current fence: the
//     webhook denies the others;
//   - writes of any other object (Pods, Events, anything unlabelled) are
//     sent as a plain client sends them. One that the webhook refuses for
//     want of this client's fence (the object is protected, the caller's
//     copy did not say so) is sent once more, stamped; a delete refused
//     because the object does not carry the current fence is made as a
//     protected one's.
//
// Each write asks g for the grant right before it is sent and is refused,
// without being sent, when there is none, protected or not: the error
// wraps fence.ErrNotHolder and names the object. A write can still be sent
// the instant after the grant ended (the process paused between the check
// and the send): it then carries the old fence, and the webhook rejects it
// if the object is protected. Reads go to c as they are.
func NewClient(c client.Client, g Grants, o ClientOptions) client.Client {
	return &fencedClient{inner: c, grants: g, fieldManager: o.FieldManager}
}

// fencedClient is the client of NewClient. It embeds nothing, so that a
// write method added to client.Client one day fails to compile here rather
// than pass through unfenced.
type fencedClient struct {
	inner        client.Client
	grants       Grants
	fieldManager string
	// shards, when set, makes this the client of a sharded manager: see
	// shardScope and scoped.
	shards *shardScope
	// unfenced is set on the client scoped to a write that is not state
	// (an Event): it is sent as it is, without any check.
	unfenced bool
}

var _ client.Client = &fencedClient{}

// Get reads through the wrapped client.
func (c *fencedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.inner.Get(ctx, key, obj, opts...)
}

// List reads through the wrapped client.
func (c *fencedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.inner.List(ctx, list, opts...)
}

// Scheme is the wrapped client's.
func (c *fencedClient) Scheme() *runtime.Scheme { return c.inner.Scheme() }

// RESTMapper is the wrapped client's.
func (c *fencedClient) RESTMapper() meta.RESTMapper { return c.inner.RESTMapper() }

// GroupVersionKindFor asks the wrapped client.
func (c *fencedClient) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return c.inner.GroupVersionKindFor(obj)
}

// IsObjectNamespaced asks the wrapped client.
func (c *fencedClient) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	return c.inner.IsObjectNamespaced(obj)
}

// grant returns the grant to write under, or the error of a refused write.
func (c *fencedClient) grant(verb, what string) (fence.Grant, error) {
	g, ok := c.grants.Current()
	if ok && g.Fence > 0 {
		return g, nil
	}
	why := "this process holds no grant"
	if r, ok := c.grants.(reasoner); ok {
		why = r.notHeld()
	}
	if c.shards != nil {
		return fence.Grant{}, fmt.Errorf("%s %s refused before it was sent: %w: %w: %s", verb, what, fence.ErrNotHolder, ErrShardNotHeld, why)
	}
	return fence.Grant{}, fmt.Errorf("%s %s refused before it was sent: %w: %s", verb, what, fence.ErrNotHolder, why)
}

// describe names an object for an error: its kind and namespace/name.
func (c *fencedClient) describe(obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, err := c.GroupVersionKindFor(obj); err == nil {
			kind = gvk.Kind
		}
	}
	if kind == "" {
		kind = fmt.Sprintf("%T", obj)
	}
	return kind + " " + klog.KObj(obj).String()
}

func stamp(obj fence.Annotated, g fence.Grant) error {
	return fence.Stamp(obj, fence.Token{Role: fence.RoleHolder, Fence: g.Fence, Lease: g.Lease})
}

// write makes one write under the grant held now. It is stamped (send
// with stamped true) when the object, as the caller gave it, carries the
// protected-by label: the fencing webhook checks a fence there and nowhere
// else. Otherwise it is sent as a plain client would send it, and if the
// webhook refuses it for want of this client's fence (the object is
// protected, but the caller's copy did not say so: a partial patch, an
// apply configuration without the label; the write then carries no fence,
// or the older one the stored object carried over: see unstamped) it is
// sent once more, stamped, under the grant held then. Nothing else is
// retried.
func (c *fencedClient) write(verb, what string, isProtected bool, send func(g fence.Grant, stamped bool) error) error {
	if c.unfenced {
		return send(fence.Grant{}, false)
	}
	g, err := c.grant(verb, what)
	if err != nil {
		return err
	}
	if isProtected {
		return send(g, true)
	}
	if err := send(g, false); !unstamped(err, g.Fence) {
		return err
	}
	if g, err = c.grant(verb, what); err != nil {
		return err
	}
	return send(g, true)
}

// Create creates obj, with the fence annotation set if it is protected.
func (c *fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c, err := c.scoped(ctx, "create", obj, true)
	if err != nil {
		return err
	}
	return c.write("create", c.describe(obj), c.protects(obj.GetLabels()), func(g fence.Grant, stamped bool) error {
		if stamped {
			if err := stamp(obj, g); err != nil {
				return err
			}
		}
		return c.inner.Create(ctx, obj, opts...)
	})
}

// Update updates obj, with the fence annotation set if it is protected.
func (c *fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c, err := c.scoped(ctx, "update", obj, true)
	if err != nil {
		return err
	}
	return c.write("update", c.describe(obj), c.protects(obj.GetLabels()), func(g fence.Grant, stamped bool) error {
		if stamped {
			if err := stamp(obj, g); err != nil {
				return err
			}
		}
		return c.inner.Update(ctx, obj, opts...)
	})
}

// Patch patches obj, with the fence annotation set in the patch if obj is
// protected.
func (c *fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c, err := c.scoped(ctx, "patch", obj, false)
	if err != nil {
		return err
	}
	return c.write("patch", c.describe(obj), c.protects(obj.GetLabels()), func(g fence.Grant, stamped bool) error {
		if stamped {
			return c.inner.Patch(ctx, obj, stampedPatch{Patch: patch, fence: g.Fence}, opts...)
		}
		return c.inner.Patch(ctx, obj, patch, opts...)
	})
}

// Apply applies obj, with the fence annotation added to it if it is
// protected. A typed apply configuration is sent as the equivalent
// unstructured one (it has no method to set an annotation that every kind
// shares), and the answer is decoded back into it, as the client would. A
// stamped apply that conflicts only with this client's own stamps of
// another grant is sent again with force (applyOwning).
func (c *fencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if a, ok := obj.(interface {
		fence.Annotated
		client.Object
	}); ok {
		c, err := c.scoped(ctx, "apply", a, true)
		if err != nil {
			return err
		}
		return c.write("apply", c.describe(a), c.protects(a.GetLabels()), func(g fence.Grant, stamped bool) error {
			if !stamped {
				return c.inner.Apply(ctx, obj, opts...)
			}
			if err := stamp(a, g); err != nil {
				return err
			}
			return c.applyOwning(g, "", func(force bool) error { return c.inner.Apply(ctx, obj, withForce(opts, force)...) })
		})
	}
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	if c, err = c.scoped(ctx, "apply", u, true); err != nil {
		return err
	}
	err = c.write("apply", c.describe(u), c.protects(u.GetLabels()), func(g fence.Grant, stamped bool) error {
		if !stamped {
			return c.inner.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
		}
		if err := stamp(u, g); err != nil {
			return err
		}
		return c.applyOwning(g, "", func(force bool) error {
			return c.inner.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), withForce(opts, force)...)
		})
	})
	if err != nil {
		return err
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return fmt.Errorf("decode the answer to the apply of %s: %w", c.describe(u), err)
	}
	return json.Unmarshal(data, obj)
}

// applyOwning sends a stamped apply under grant g, and once more with
// force ownership when the API server refuses it for a conflict whose
// every cause is a field this client owns under another grant
// (ownConflict: the fence annotation; for a subresource, fields of its
// field manager base with another fence). Any other conflict is returned
// as it is. The second apply is sent only while g is still held.
func (c *fencedClient) applyOwning(g fence.Grant, base string, apply func(force bool) error) error {
	err := apply(false)
	if !ownConflict(err, base, g.Fence) {
		return err
	}
	if cur, ok := c.grants.Current(); !ok || cur.Fence != g.Fence {
		return err
	}
	return apply(true)
}

// withForce adds force ownership to the options of an apply.
func withForce(opts []client.ApplyOption, force bool) []client.ApplyOption {
	if !force {
		return opts
	}
	return append(append([]client.ApplyOption{}, opts...), client.ForceOwnership)
}

// toUnstructured is the unstructured equivalent of an apply configuration:
// its JSON, which holds the fields it sets and nothing else.
func toUnstructured(obj runtime.ApplyConfiguration) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode apply configuration %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("decode apply configuration %T: %w", obj, err)
	}
	return u, nil
}

// Delete deletes obj while a grant is held.
//
// An object that the caller gives without the protected-by label is
// deleted as a plain client would (only delete permission needed). If the
// fencing webhook refuses that delete because the stored object does not
// carry the current fence (it is protected, and was last written under
// another grant), it is deleted the way a protected object is:
//
// A delete carries no fence, and the fencing webhook admits one from the
// holder pod only of an object last written with the current fence (a
// pod's identity cannot tell its current grant from an older one of its
// own). So the fence is written on obj first, by a merge patch stamped as
// any other (on the caller's preconditions, its resourceVersion and UID,
// if it gives them), and then the version that patch made is deleted, with
// a precondition on it and the caller's UID: a write in between makes the
// delete fail with a conflict instead of deleting what it did not see, and
// an object of the same name created since is not the one the caller meant
// (a conflict too, as the API server answers a delete whose UID
// precondition fails).
//
// Under client.DryRunAll nothing is written (deleteDryRun).
func (c *fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c, err := c.scoped(ctx, "delete", obj, false)
	if err != nil {
		return err
	}
	if c.unfenced {
		return c.inner.Delete(ctx, obj, opts...)
	}
	g, err := c.grant("delete", c.describe(obj))
	if err != nil {
		return err
	}
	if !c.protects(obj.GetLabels()) {
		if err := c.inner.Delete(ctx, obj, opts...); !olderWrite(err, g.Fence) {
			return err
		}
	}
	o := (&client.DeleteOptions{}).ApplyOptions(opts)
	pre := o.Preconditions
	if pre == nil {
		pre = &metav1.Preconditions{}
	}
	if len(o.DryRun) > 0 {
		return c.deleteDryRun(ctx, obj, pre, opts)
	}
	if err := c.stampForDelete(ctx, obj, pre); err != nil {
		return err
	}
	rv := obj.GetResourceVersion()
	return c.inner.Delete(ctx, obj, append(opts, client.Preconditions{UID: pre.UID, ResourceVersion: &rv})...)
}

// stampForDelete writes the fence on obj (a stamped merge patch on the
// caller's preconditions), before it is deleted.
func (c *fencedClient) stampForDelete(ctx context.Context, obj client.Object, pre *metav1.Preconditions, opts ...client.PatchOption) error {
	g, err := c.grant("delete", c.describe(obj))
	if err != nil {
		return err
	}
	patch := stampedPatch{Patch: client.RawPatch(types.MergePatchType, stampPatch(pre)), fence: g.Fence}
	if err := c.inner.Patch(ctx, obj, patch, opts...); err != nil {
		if pre.UID != nil && apistatus.OtherUID(err) {
			// The UID is immutable: the name stands for another object.
			err = apierrors.NewConflict(c.resource(obj), obj.GetName(),
				fmt.Errorf("precondition failed: UID in precondition: %s (%w)", *pre.UID, err))
		}
		return fmt.Errorf("write the fence on %s before deleting it: %w", c.describe(obj), err)
	}
	return nil
}

// deleteDryRun answers a dry-run delete of a protected object without
// writing anything: the stamp as a dry run (is this pod the holder, with
// the current fence, allowed to patch, on the caller's preconditions?),
// then the delete as a dry run, which the API server judges on the stored
// object: permissions, admission, preconditions. The stored object still
// carries the fence it had, so the webhook may refuse the dry-run delete
// because it was not last written with the current fence; the stamp that
// the dry run did not store would have put it there, so that refusal alone
// is answered as a success. obj is left as the caller gave it.
func (c *fencedClient) deleteDryRun(ctx context.Context, obj client.Object, pre *metav1.Preconditions, opts []client.DeleteOption) error {
	stamped, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("dry-run delete of %s: cannot copy %T", c.describe(obj), obj)
	}
	if err := c.stampForDelete(ctx, stamped, pre, client.DryRunAll); err != nil {
		return err
	}
	if err := c.inner.Delete(ctx, obj, opts...); !olderWrite(err, fenceOf(stamped)) {
		return err
	}
	return nil
}

// fenceOf is the fence an object carries, 0 if none.
func fenceOf(obj client.Object) int64 {
	n, err := strconv.ParseInt(obj.GetAnnotations()[fence.Annotation], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// resource is the group and resource of obj, for an error that names it;
// its kind when the client cannot map it.
func (c *fencedClient) resource(obj client.Object) schema.GroupResource {
	gvk, err := c.inner.GroupVersionKindFor(obj)
	if err != nil {
		return schema.GroupResource{Resource: fmt.Sprintf("%T", obj)}
	}
	if m, err := c.inner.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		return m.Resource.GroupResource()
	}
	return schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
}

// stampPatch is the merge patch that writes the fence on an object before
// it is deleted, on the caller's preconditions: a resourceVersion makes it
// a compare-and-swap, a UID refuses an object of the same name created
// since (the API server never changes a UID).
func stampPatch(pre *metav1.Preconditions) []byte {
	meta := map[string]string{}
	if pre.ResourceVersion != nil {
		meta["resourceVersion"] = *pre.ResourceVersion
	}
	if pre.UID != nil {
		meta["uid"] = string(*pre.UID)
	}
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings always marshal
	}
	return data
}

// DeleteAllOf deletes the objects while a grant is held; it carries no
// fence, so of the protected ones only those last written with the current
// fence are deleted (the webhook denies the others).
func (c *fencedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	what := c.describe(obj)
	if o := (&client.DeleteAllOfOptions{}).ApplyOptions(opts); o.Namespace != "" {
		what = strings.TrimSuffix(what, " ") + " in namespace " + o.Namespace
	}
	if c.shards != nil && !c.isEvent(obj) {
		return fmt.Errorf("delete all of %s refused before it was sent: %w: %w: a sharded client deletes objects one by one, each under its own shard's fence", what, fence.ErrNotHolder, ErrShardNotHeld)
	}
	if c.unfenced || c.isEvent(obj) {
		return c.inner.DeleteAllOf(ctx, obj, opts...)
	}
	if _, err := c.grant("delete all of", what); err != nil {
		return err
	}
	return c.inner.DeleteAllOf(ctx, obj, opts...)
}

// Status returns a writer of the status subresource that carries the fence
// in its field manager.
func (c *fencedClient) Status() client.SubResourceWriter {
	return &subResourceClient{c: c, name: "status", writer: c.inner.Status()}
}

// SubResource returns a client of the subresource whose writes carry the
// fence in their field manager.
func (c *fencedClient) SubResource(subResource string) client.SubResourceClient {
	inner := c.inner.SubResource(subResource)
	return &subResourceClient{c: c, name: subResource, writer: inner, SubResourceReader: inner}
}
