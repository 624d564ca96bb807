package scaleguard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fencedlease/fencedlease/internal/webhook/scaleguard"
	"github.com/fencedlease/fencedlease/test/harness"
)

// TestEnsureConcurrent: concurrent Ensure calls on the ClusterRole as shipped
// (no rules) all end guarded, each confirmed by the real authorizer.
func TestEnsureConcurrent(t *testing.T) {
	harness.Needs(t, "an API server")
	ctx := context.Background()
	g := scaleguard.Guard{Role: "test-scale-guard", SANamespace: "fencedlease-system", SAName: "scale-guard"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: g.Role}}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: g.Role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g.Role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: g.SANamespace, Name: g.SAName}}}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	if ok, err := scaleguard.Allowed(g, ctx, env.Client, gr, "default", "web-0"); err != nil || ok {
		t.Fatalf("before Ensure: allowed=%v err=%v, want false", ok, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = g.Ensure(ctx, env.Client, gr, "default", fmt.Sprintf("web-%d", i)) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Ensure web-%d: %v", i, err)
		}
		if ok, err := scaleguard.Allowed(g, ctx, env.Client, gr, "default", fmt.Sprintf("web-%d", i)); err != nil || !ok {
			t.Errorf("web-%d: allowed=%v err=%v, want true", i, ok, err)
		}
	}
	if ok, _ := scaleguard.Allowed(g, ctx, env.Client, gr, "other", "web-0"); ok {
		t.Errorf("web-0 in namespace other is guarded, want only default")
	}
}
