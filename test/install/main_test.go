package install_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	// env is the control plane, started without the CRDs: installing them is
	// part of what is tested.
	env *testenv.Env
	// adminKubeconfig is a kubeconfig file of a cluster administrator.
	adminKubeconfig string
	// image is what the Dockerfile builds: the binaries by their path in the
	// image.
	image *builtImage
	// admin is an administrator's client that knows CRDs too.
	admin client.Client
)

// imageVersion is the VERSION build argument of the test's image build.
const imageVersion = "v0.0.0-install-test"

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, "helm and kubectl (the chart and config/default rendered), or "+harness.ControlPlane))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	testenv.SetLogger()
	tmp, err := os.MkdirTemp("", "fencedlease-install-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// The image's binaries are built first: the manager that the tests run
	// is the one the image would hold.
	if image, err = buildImage(filepath.Join(tmp, "image"), map[string]string{"VERSION": imageVersion}); err != nil {
		fmt.Fprintln(os.Stderr, "build what the Dockerfile builds:", err)
		return 1
	}
	env, err = testenv.Start(func(te *envtest.Environment) {
		te.CRDDirectoryPaths, te.ErrorIfCRDPathMissing = nil, false
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}()
	scheme := setup.Scheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if admin, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "create client:", err)
		return 1
	}
	user, err := env.AddUser(envtest.User{Name: "install-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "add administrator:", err)
		return 1
	}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "administrator's kubeconfig:", err)
		return 1
	}
	adminKubeconfig = filepath.Join(tmp, "admin.kubeconfig")
	if err := os.WriteFile(adminKubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(helmHomeDir)
	return m.Run()
}
