package fencedlease

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// ProtectionChecker tells whether the fencing webhook checks writes to the
// protected objects of a namespace (internal/coverage implements it, from the
// webhook configuration actually installed).
type ProtectionChecker interface {
	// Unprotected says why writes to protected objects in the namespace are
	// not checked; "" when they are. It must not block on the API server.
	Unprotected(ctx context.Context, namespace string) string
	// Sources trigger reconciles of the FencedLeases whose answer may have
	// changed; fls reads FencedLeases.
	Sources(fls client.Reader) []source.Source
}

// unprotected is the Degraded condition of a FencedLease whose namespace the
// fencing webhook does not cover, nil when it does or nobody checks.
func (r *Reconciler) unprotected(ctx context.Context, s *scope) *condition {
	if r.Protection == nil {
		return nil
	}
	if msg := r.Protection.Unprotected(ctx, s.fl.Namespace); msg != "" {
		return &condition{reason: fencingv1alpha1.ReasonProtectionUnavailable, message: msg}
	}
	return nil
}
