package scaleguard

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// conflictBackoff paces the retries of a guard write: every protecting write
// of a scale-capable resource may write the one ClusterRole, so bursts of
// new names conflict more often than client-go's default five steps allow.
var conflictBackoff = wait.Backoff{Steps: 20, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: time.Second}

// Guard names the guard's objects: the ClusterRole whose rules hold the
// guarded names, and the marker service account it is bound to.
type Guard struct {
	Role            string
	SANamespace     string
	SAName          string
	ConfirmTimeout  time.Duration // how long to wait for the authorizer to see a new name; 10s if zero
	ConfirmInterval time.Duration // 100ms if zero
}

// Ensure makes sure the object name of resource gr in namespace ns is
// guarded: it adds the name to the ClusterRole's rules if missing (optimistic
// concurrency, retried on conflict), then waits until a SubjectAccessReview
// for the marker service account is allowed, so that the API server that
// answers it has the name in its RBAC cache before the caller's write
// returns. The error names the object and the reason.
func (g Guard) Ensure(ctx context.Context, c client.Client, gr schema.GroupResource, ns, name string) error {
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		var role rbacv1.ClusterRole
		if err := c.Get(ctx, types.NamespacedName{Name: g.Role}, &role); err != nil {
			return err
		}
		rules, changed := Add(role.Rules, gr, ns, name)
		if !changed {
			return nil
		}
		role.Rules = rules
		return c.Update(ctx, &role)
	})
	if err != nil {
		return fmt.Errorf("guard the scale of %s %s/%s in ClusterRole %s: %w", gr, ns, name, g.Role, err)
	}
	timeout, interval := g.ConfirmTimeout, g.ConfirmInterval
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if interval == 0 {
		interval = 100 * time.Millisecond
	}
	err = wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		return g.allowed(ctx, c, gr, ns, name)
	})
	if err != nil {
		return fmt.Errorf("confirm the scale guard of %s %s/%s: %w", gr, ns, name, err)
	}
	return nil
}

func (g Guard) allowed(ctx context.Context, c client.Client, gr schema.GroupResource, ns, name string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + g.SANamespace + ":" + g.SAName,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + g.SANamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: Group, Resource: Resource(gr, ns), Name: name, Verb: Verb,
		},
	}}
	if err := c.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}
