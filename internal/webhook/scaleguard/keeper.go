package scaleguard

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator reads and writes the guard's ClusterRole, by name, and holds
// the guard verb itself: RBAC lets a writer add to a role only what it may
// do (escalation check). It confirms each new name with a
// SubjectAccessReview.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;list;watch;update,resourceNames=scale-guard
// +kubebuilder:rbac:groups=scale-guard.fencedlease.io,resources=*,verbs=guard
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Keeper guards the objects of the fencing webhook's protecting writes. It
// reads the guard's ClusterRole from a cache of its own that holds that one
// object, and writes it (Guard.Ensure) only for a name it does not hold:
// the write of an object already guarded costs nothing.
type Keeper struct {
	Guard  Guard
	client client.Client
	cache  cache.Cache
}

// NewKeeper creates a Keeper for g and adds its cache to the manager. The
// confirmation of a new name is bounded by 3 seconds unless g says
// otherwise, within the fencing webhook's timeout.
func NewKeeper(mgr ctrl.Manager, g Guard) (*Keeper, error) {
	if g.ConfirmTimeout == 0 {
		g.ConfirmTimeout = 3 * time.Second
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&rbacv1.ClusterRole{}: {Field: fields.OneTermEqualSelector("metadata.name", g.Role)},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the cache of the scale guard %s: %w", g.Role, err)
	}
	if _, err := c.GetInformer(context.Background(), &rbacv1.ClusterRole{}, cache.BlockUntilSynced(false)); err != nil {
		return nil, fmt.Errorf("register the informer of the scale guard %s: %w", g.Role, err)
	}
	if err := mgr.Add(withCache{c}); err != nil {
		return nil, fmt.Errorf("add the cache of the scale guard %s: %w", g.Role, err)
	}
	// Not the manager's client: its reads would start a cache of every
	// ClusterRole, which the operator may not list. The slow path reads the
	// role from the API server, as a compare-and-swap needs anyway.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("create the client of the scale guard %s: %w", g.Role, err)
	}
	return &Keeper{Guard: g, client: direct, cache: c}, nil
}

// Ensure makes sure the object is guarded: at once if the cached role
// already names it, else through Guard.Ensure.
func (k *Keeper) Ensure(ctx context.Context, gr schema.GroupResource, ns, name string) error {
	var role rbacv1.ClusterRole
	if err := k.cache.Get(ctx, types.NamespacedName{Name: k.Guard.Role}, &role); err == nil && Guarded(role.Rules, gr, ns, name) {
		return nil
	}
	return k.Guard.Ensure(ctx, k.client, gr, ns, name)
}

// withCache makes the manager treat the cache as one: started first, on
// every replica (each serves the webhook), and synced before controllers
// start.
type withCache struct{ cache.Cache }

func (w withCache) GetCache() cache.Cache { return w.Cache }
