package scaleguard

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Resync brings the guard in line with the objects that are protected, on
// the leader, at start and every Interval: every labelled object of a
// resource whose scale the webhook decides is guarded (objects protected
// before the guard existed, or while it was being reset), and a name whose
// object has been gone or unlabelled for Grace is let go (Plan).
type Resync struct {
	Guard Guard
	// Client writes the role; Reader (the API reader: no cache of the
	// listed resources) reads it and lists the labelled objects.
	Client client.Client
	Reader client.Reader
	Mapper meta.RESTMapper
	// Scaled lists the resources whose scale writes the webhook decides.
	Scaled func(ctx context.Context) []schema.GroupResource
	// Interval between resyncs (a minute if zero); Grace before a name is
	// let go (two minutes if zero: longer than an API server request may
	// take from admission to the store).
	Interval, Grace time.Duration

	since map[Key]time.Time
}

// NeedLeaderElection is true: one replica, the leader, resyncs.
func (r *Resync) NeedLeaderElection() bool { return true }

// Start resyncs until ctx ends; a failed resync is logged and tried again
// at the next interval.
func (r *Resync) Start(ctx context.Context) error {
	interval := r.Interval
	if interval == 0 {
		interval = time.Minute
	}
	log := ctrl.LoggerFrom(ctx).WithValues("clusterRole", r.Guard.Role)
	for {
		if err := r.Once(ctx); err != nil {
			log.Error(err, "Cannot resync the scale guard")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// Once resyncs the guard once.
func (r *Resync) Once(ctx context.Context) error {
	grace := r.Grace
	if grace == 0 {
		grace = 2 * time.Minute
	}
	protected := map[Key]bool{}
	for _, gr := range r.Scaled(ctx) {
		if err := r.labelled(ctx, gr, protected); err != nil {
			return err
		}
	}
	var added, removed int
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		var role rbacv1.ClusterRole
		if err := r.Reader.Get(ctx, types.NamespacedName{Name: r.Guard.Role}, &role); err != nil {
			return fmt.Errorf("read the scale guard %s: %w", r.Guard.Role, err)
		}
		add, remove, next := Plan(Keys(role.Rules), protected, r.since, time.Now(), grace)
		rules, changed := Apply(role.Rules, add, remove)
		if changed {
			role.Rules = rules
			if err := r.Client.Update(ctx, &role); err != nil {
				return err
			}
		}
		r.since, added, removed = next, len(add), len(remove)
		return nil
	})
	if err != nil {
		return err
	}
	if added+removed > 0 {
		ctrl.LoggerFrom(ctx).Info("Resynced the scale guard", "clusterRole", r.Guard.Role, "added", added, "removed", removed)
	}
	return nil
}

// labelled adds the keys of the labelled objects of gr to protected.
func (r *Resync) labelled(ctx context.Context, gr schema.GroupResource, protected map[Key]bool) error {
	gvk, err := r.Mapper.KindFor(gr.WithVersion(""))
	if err != nil {
		return fmt.Errorf("the kind of resource %s: %w", gr, err)
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.Reader.List(ctx, list, client.HasLabels{fencingv1alpha1.LabelProtectedBy}); err != nil {
		return fmt.Errorf("list the protected %s: %w", gr, err)
	}
	for _, o := range list.Items {
		protected[Key{Resource: Resource(gr, o.Namespace), Name: o.Name}] = true
	}
	return nil
}
