package fencedcontroller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// fieldOwner returns the field manager that carries the fence for a write
// of obj whose own field manager is manager ("" when it names none).
func (s *subResourceClient) fieldOwner(verb string, obj client.Object, manager string) (client.FieldOwner, error) {
	what := s.name + " of " + s.c.describe(obj)
	g, err := s.c.grant(verb, what)
	if err != nil {
		return "", err
	}
	if manager == "" {
		manager = s.c.fieldManager
	}
	fm, err := FieldManager(manager, g.Fence)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", verb, what, err)
	}
	return client.FieldOwner(fm), nil
}

// Create creates the subresource with the fence in the field manager.
func (s *subResourceClient) Create(ctx context.Context, obj, subResource client.Object, opts ...client.SubResourceCreateOption) error {
	o := (&client.SubResourceCreateOptions{}).ApplyOptions(opts)
	fm, err := s.fieldOwner("create", obj, o.FieldManager)
	if err != nil {
		return err
	}
	return s.writer.Create(ctx, obj, subResource, append(opts, fm)...)
}

// Update updates the subresource with the fence in the field manager.
func (s *subResourceClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	o := (&client.SubResourceUpdateOptions{}).ApplyOptions(opts)
	fm, err := s.fieldOwner("update", obj, o.FieldManager)
	if err != nil {
		return err
	}
	return s.writer.Update(ctx, obj, append(opts, fm)...)
}

// Patch patches the subresource with the fence in the field manager. The
// patch itself is sent as it is: a subresource write cannot change the
// object's metadata.
func (s *subResourceClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	o := (&client.SubResourcePatchOptions{}).ApplyOptions(opts)
	fm, err := s.fieldOwner("patch", obj, o.FieldManager)
	if err != nil {
		return err
	}
	return s.writer.Patch(ctx, obj, patch, append(opts, fm)...)
}

// Apply applies the subresource with the fence in the field manager.
func (s *subResourceClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	o := (&client.SubResourceApplyOptions{}).ApplyOpts(opts)
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	fm, err := s.fieldOwner("apply", u, o.FieldManager)
	if err != nil {
		return err
	}
	return s.writer.Apply(ctx, obj, append(opts, fm)...)
}
