package scaleguard

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator reads and writes the guard's ClusterRole, by name, and holds
// the guard verb itself: RBAC lets a writer add to a role only what it may
// do (escalation check). It confirms each name with a SubjectAccessReview.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;update,resourceNames=scale-guard
// +kubebuilder:rbac:groups=scale-guard.fencedlease.io,resources=*,verbs=guard
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Keeper guards the objects of the fencing webhook's protecting writes
// (Guard.Ensure). It reads the guard's ClusterRole from the API server, not
// from a cache: a cache that has not seen the resync let a name go (a
// replica paused, a watch behind) would still show it, and a write
// relabelling that object would be admitted unguarded. So each protecting
// write of an object whose scale is decided costs one read of the role and
// one SubjectAccessReview, and a write of the role only for a missing name.
type Keeper struct {
	Guard  Guard
	client client.Client
}

// NewKeeper creates a Keeper for g on the manager's configuration. The
// confirmation of a name is bounded by 3 seconds unless g says otherwise,
// within the fencing webhook's timeout.
func NewKeeper(mgr ctrl.Manager, g Guard) (*Keeper, error) {
	if g.ConfirmTimeout == 0 {
		g.ConfirmTimeout = 3 * time.Second
	}
	// Not the manager's client: its reads would start a cache of every
	// ClusterRole, which the operator may not list.
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("create the client of the scale guard %s: %w", g.Role, err)
	}
	return &Keeper{Guard: g, client: c}, nil
}

// Ensure makes sure the object is guarded: see Guard.Ensure.
func (k *Keeper) Ensure(ctx context.Context, gr schema.GroupResource, ns, name string) error {
	return k.Guard.Ensure(ctx, k.client, gr, ns, name)
}
