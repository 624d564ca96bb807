package storage_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/s3server"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env *testenv.Env
	// gatewayConfig acts as the gateway's own service account, with the
	// RBAC the chart gives it (gatewayRules).
	gatewayConfig *rest.Config
	// store is the real S3 server.
	store *s3server.Server
	// writerBin is testdata/writer, built once.
	writerBin string
)

// gatewayRules are the fence gateway's permissions, as in the chart.
var gatewayRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}},
	{APIGroups: []string{"fencing.fencedlease.io"}, Resources: []string{"fencedleases", "fencedshardsets"}, Verbs: []string{"get"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// TestMain starts the S3 server, the control plane and the operator; under
// -short none of them, and only the tests that need none run.
func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

// needsServers skips a test that needs what TestMain starts under -short.
func needsServers(t *testing.T) {
	t.Helper()
	harness.Needs(t, harness.ControlPlane+" and "+harness.S3Server)
}

func run(m *testing.M) int {
	testenv.SetLogger()
	dir, err := os.MkdirTemp("", "storage-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if store, err = s3server.Start(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: these tests need a real S3 server:", err)
		return 1
	}
	defer store.Stop()
	writerBin = filepath.Join(dir, "writer")
	if out, err := exec.Command("go", "build", "-o", writerBin, "./testdata/writer").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build testdata/writer: %v\n%s", err, out)
		return 1
	}
	if env, err = testenv.Start(testenv.WithWebhooks()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := setupCluster(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	operator, err := testenv.OperatorConfig(ctx, env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := testenv.StartManager(ctx, operator, testenv.ManagerOptions{Webhooks: &env.WebhookInstallOptions})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { mgr.Crash(); mgr.Wait() }()
	return m.Run()
}

// setupCluster creates the workload ClusterRole (holders renew their Lease) and
// the gateway's service account with its RBAC.
func setupCluster(ctx context.Context) error {
	role, err := testenv.WorkloadRole()
	if err != nil {
		return err
	}
	if err := env.Client.Create(ctx, role); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fence-gateway"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "fence-gateway"}}
	gw := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fence-gateway"}, Rules: gatewayRules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fence-gateway"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: gw.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: sa.Name}}}
	for _, obj := range []client.Object{ns, sa, gw, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			return err
		}
	}
	gatewayConfig, err = testenv.ServiceAccountConfig(ctx, env.Config, sa)
	return err
}
