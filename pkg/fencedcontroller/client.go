package fencedcontroller

import (
	"context"
	"encoding/json"
	"fmt"
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
// grant, and stamps that grant's fence on every write:
//
//   - Create, Update, Patch and Apply of a main resource set the annotation
//     fencedlease.io/fence to the fence (for a patch, in the patch itself;
//     see stampPatchData for each patch type);
//   - writes of a subresource (Status(), SubResource("scale"), ...) set the
//     field manager to "<manager>;fencedlease.io/fence=<N>" (FieldManager),
//     <manager> being the write's own field manager or o.FieldManager;
//   - Delete writes the fence on the object first, then deletes the version
//     that write made (the fencing webhook admits a delete from the current
//     holder pod only, of an object carrying its current fence);
//     DeleteAllOf carries no fence (a delete cannot), so it deletes only
//     the objects last written with the current fence: the webhook denies
//     the others.
//
// Each write asks g for the grant right before it is sent and is refused,
// without being sent, when there is none: the error wraps fence.ErrNotHolder
// and names the object. A write can still be sent the instant after the
// grant ended (the process paused between the check and the send): it then
// carries the old fence, and the webhook rejects it. Reads go to c as they
// are.
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

// Create creates obj with the fence annotation set.
func (c *fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	g, err := c.grant("create", c.describe(obj))
	if err != nil {
		return err
	}
	if err := stamp(obj, g); err != nil {
		return err
	}
	return c.inner.Create(ctx, obj, opts...)
}

// Update updates obj with the fence annotation set.
func (c *fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	g, err := c.grant("update", c.describe(obj))
	if err != nil {
		return err
	}
	if err := stamp(obj, g); err != nil {
		return err
	}
	return c.inner.Update(ctx, obj, opts...)
}

// Patch patches obj with the fence annotation set in the patch.
func (c *fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	g, err := c.grant("patch", c.describe(obj))
	if err != nil {
		return err
	}
	return c.inner.Patch(ctx, obj, stampedPatch{Patch: patch, fence: g.Fence}, opts...)
}

// Apply applies obj with the fence annotation added to it. A typed apply
// configuration is sent as the equivalent unstructured one (it has no
// method to set an annotation that every kind shares), and the answer is
// decoded back into it, as the client would.
func (c *fencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if a, ok := obj.(interface {
		fence.Annotated
		client.Object
	}); ok {
		g, err := c.grant("apply", c.describe(a))
		if err != nil {
			return err
		}
		if err := stamp(a, g); err != nil {
			return err
		}
		return c.inner.Apply(ctx, obj, opts...)
	}
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	g, err := c.grant("apply", c.describe(u))
	if err != nil {
		return err
	}
	if err := stamp(u, g); err != nil {
		return err
	}
	if err := c.inner.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
		return err
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return fmt.Errorf("decode the answer to the apply of %s: %w", c.describe(u), err)
	}
	return json.Unmarshal(data, obj)
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

// Delete deletes obj while a grant is held. A delete carries no fence, and
// the fencing webhook admits one from the holder pod only of an object last
// written with the current fence (a pod's identity cannot tell its current
// grant from an older one of its own). So the fence is written on obj first,
// by a merge patch stamped as any other (on the caller's preconditions, its
// resourceVersion and UID, if it gives them), and then the version that
// patch made is deleted, with a precondition on it and the caller's UID: a
// write in between makes the delete fail with a conflict instead of
// deleting what it did not see, and an object of the same name created
// since is not the one the caller meant (a conflict too, as the API server
// answers a delete whose UID precondition fails).
func (c *fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if _, err := c.grant("delete", c.describe(obj)); err != nil {
		return err
	}
	o := (&client.DeleteOptions{}).ApplyOptions(opts)
	pre := o.Preconditions
	if pre == nil {
		pre = &metav1.Preconditions{}
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, stampPatch(pre))); err != nil {
		if pre.UID != nil && apistatus.OtherUID(err) {
			// The UID is immutable: the name stands for another object.
			err = apierrors.NewConflict(c.resource(obj), obj.GetName(),
				fmt.Errorf("precondition failed: UID in precondition: %s (%w)", *pre.UID, err))
		}
		return fmt.Errorf("write the fence on %s before deleting it: %w", c.describe(obj), err)
	}
	rv := obj.GetResourceVersion()
	return c.inner.Delete(ctx, obj, append(opts, client.Preconditions{UID: pre.UID, ResourceVersion: &rv})...)
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
