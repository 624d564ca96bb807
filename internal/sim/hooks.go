package sim

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WebhookClients are what a fencing webhook replica's handler is built on:
// a FencedLease cache of its own, which lags behind the API server by a
// distance the simulation chooses, and a reader of the API server itself,
// whose every read is a point where the scheduler may run anything else.
type WebhookClients struct {
	Cache     client.Reader
	APIReader client.Reader
}

// NewWebhook builds a webhook replica's handler: the handler the fencing
// webhook runs.
type NewWebhook func(c WebhookClients) admission.Handler

// hook is one replica of the fencing webhook.
type hook struct {
	id int
	// view is the store revision its FencedLease cache serves.
	view    int64
	handler admission.Handler
}

// lags says whether the replica's cache is behind the FencedLease's
// newest version.
func (h *hook) lags(s *Sim, lease string) bool {
	versions := s.store.hist[objKey{kind: "FencedLease", namespace: s.world.namespace, name: lease}]
	return len(versions) > 0 && versions[len(versions)-1].rev > h.view
}

// hookCache serves the replica's cache.
type hookCache struct {
	s *Sim
	h *hook
}

func (c hookCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return c.s.store.get(c.h.view, key, obj)
}

func (c hookCache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.s.store.list(c.h.view, list, opts...)
}

// hookLive reads from the API server.
type hookLive struct {
	s *Sim
	h *hook
}

func (l hookLive) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	kind, err := l.s.store.kindOf(obj)
	if err != nil {
		return err
	}
	return l.s.do(ctx, fmt.Sprintf("webhook %d live get %s %s", l.h.id, kind, key), false, func() error {
		return l.s.store.get(l.s.store.rev, key, obj)
	})
}

func (l hookLive) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	kind, err := l.s.store.kindOf(list)
	if err != nil {
		return err
	}
	return l.s.do(ctx, fmt.Sprintf("webhook %d live list %s", l.h.id, kind), false, func() error {
		return l.s.store.list(l.s.store.rev, list, opts...)
	})
}
