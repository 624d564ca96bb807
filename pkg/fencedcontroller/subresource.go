package fencedcontroller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/pkg/fence"
)

// subResourceClient writes a subresource (status, scale, ...) of an object
// with the fence in the field manager of every write. Reads pass through.
type subResourceClient struct {
	client.SubResourceReader
	c      *fencedClient
	name   string
	writer client.SubResourceWriter
}

var _ client.SubResourceClient = &subResourceClient{}

// Get reads the subresource through the wrapped client.
func (s *subResourceClient) Get(ctx context.Context, obj, subResource client.Object, opts ...client.SubResourceGetOption) error {
	if s.SubResourceReader == nil {
		return fmt.Errorf("the %s subresource of %s cannot be read through Status(): use SubResource(%q)", s.name, s.c.describe(obj), s.name)
	}
	return s.SubResourceReader.Get(ctx, obj, subResource, opts...)
}

// write makes a write of the subresource of obj whose own field manager is
// manager ("" when it names none), as fencedClient.write does: when obj
// (labels, as the caller gave it) is protected, with the fence in the field
// manager, "<manager>;fencedlease.io/fence=<N>" (manager, or the client's
// FieldManager when it names none); otherwise with the field manager as
// the caller gave it, and once more stamped if the fencing webhook refuses
// it for its missing fence. send gets the field manager to set ("" for
// none) and the grant's fence (0 when unstamped).
func (s *subResourceClient) write(ctx context.Context, verb string, obj client.Object, labels map[string]string, manager string,
	send func(c *fencedClient, fm string, fenceValue int64) error) error {
	c, err := s.c.scoped(ctx, verb+" "+s.name+" of", obj, false)
	if err != nil {
		return err
	}
	what := s.name + " of " + c.describe(obj)
	return c.write(verb, what, c.protects(labels), func(g fence.Grant, stamped bool) error {
		if !stamped {
			return send(c, manager, 0)
		}
		if manager == "" {
			manager = c.fieldManager
		}
		fm, err := FieldManager(manager, g.Fence)
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, what, err)
		}
		return send(c, fm, g.Fence)
	})
}

// owner is the option that sets field manager fm, if any.
func owner[O any](opts []O, fm string, as func(client.FieldOwner) O) []O {
	if fm == "" {
		return opts
	}
	return append(append([]O{}, opts...), as(client.FieldOwner(fm)))
}

// Create creates the subresource, with the fence in the field manager if
// obj is protected.
func (s *subResourceClient) Create(ctx context.Context, obj, subResource client.Object, opts ...client.SubResourceCreateOption) error {
	o := (&client.SubResourceCreateOptions{}).ApplyOptions(opts)
	return s.write(ctx, "create", obj, obj.GetLabels(), o.FieldManager, func(_ *fencedClient, fm string, _ int64) error {
		return s.writer.Create(ctx, obj, subResource, owner(opts, fm, func(f client.FieldOwner) client.SubResourceCreateOption { return f })...)
	})
}

// Update updates the subresource, with the fence in the field manager if
// obj is protected.
func (s *subResourceClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	o := (&client.SubResourceUpdateOptions{}).ApplyOptions(opts)
	return s.write(ctx, "update", obj, obj.GetLabels(), o.FieldManager, func(_ *fencedClient, fm string, _ int64) error {
		return s.writer.Update(ctx, obj, owner(opts, fm, func(f client.FieldOwner) client.SubResourceUpdateOption { return f })...)
	})
}

// Patch patches the subresource, with the fence in the field manager if
// obj is protected. The patch itself is sent as it is: the fence of a
// subresource write is in its field manager.
func (s *subResourceClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	o := (&client.SubResourcePatchOptions{}).ApplyOptions(opts)
	return s.write(ctx, "patch", obj, obj.GetLabels(), o.FieldManager, func(_ *fencedClient, fm string, _ int64) error {
		return s.writer.Patch(ctx, obj, patch, owner(opts, fm, func(f client.FieldOwner) client.SubResourcePatchOption { return f })...)
	})
}

// Apply applies the subresource, with the fence in the field manager if
// the apply configuration is protected (it carries the protected-by label;
// without it the first apply of a protected object is refused for its
// missing fence and sent again). A stamped apply that conflicts only with
// fields this field manager applied under another grant is sent again
// with force (fencedClient.applyOwning).
func (s *subResourceClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	o := (&client.SubResourceApplyOptions{}).ApplyOpts(opts)
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	return s.write(ctx, "apply", u, u.GetLabels(), o.FieldManager, func(c *fencedClient, fm string, fenceValue int64) error {
		send := func(force bool) error {
			all := owner(opts, fm, func(f client.FieldOwner) client.SubResourceApplyOption { return f })
			if force {
				all = append(all, client.ForceOwnership)
			}
			return s.writer.Apply(ctx, obj, all...)
		}
		if fenceValue == 0 {
			return send(false)
		}
		base, _, _ := fieldmanager.Parse(fm)
		return c.applyOwning(fence.Grant{Fence: fenceValue}, base, send)
	})
}
