package install_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	chartDir = "charts/fencedlease"
	// The release name and namespace that name every object as
	// config/default does.
	defaultRelease   = "fencedlease"
	defaultNamespace = "fencedlease-system"
)

func repoPath(elem ...string) string {
	return filepath.Join(append([]string{testenv.RepoRoot()}, elem...)...)
}

// helmBinary is the helm that hack/tools.sh builds; make exports its path.
func helmBinary() (string, error) {
	h := os.Getenv("FENCEDLEASE_HELM")
	if h == "" {
		h = harness.Tool("helm")
	}
	if _, err := os.Stat(h); err != nil {
		return "", fmt.Errorf("no helm at %s: run 'make helm' (or 'make test') first", h)
	}
	return h, nil
}

// run runs a command in the repository and returns its standard output; an
// error carries the standard error.
func run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helm runs helm with its own cache and configuration directories and, when
// a control plane runs, the administrator's kubeconfig.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	h, err := helmBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := helmHome(t)
	env := []string{"HELM_CACHE_HOME=" + dir + "/cache", "HELM_CONFIG_HOME=" + dir + "/config", "HELM_DATA_HOME=" + dir + "/data"}
	if adminKubeconfig != "" {
		env = append(env, "KUBECONFIG="+adminKubeconfig)
	}
	return run(context.Background(), env, h, args...)
}

var helmHomeDir string

func helmHome(t testing.TB) string {
	if helmHomeDir == "" {
		d, err := os.MkdirTemp("", "fencedlease-helm-")
		if err != nil {
			t.Fatal(err)
		}
		helmHomeDir = d
	}
	return helmHomeDir
}

// kubectl runs the control plane's kubectl as the administrator.
func kubectl(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), append([]string{"--kubeconfig", adminKubeconfig}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// renderChart renders the chart as release name in namespace ns, without
// the test hooks, with the CRDs.
func renderChart(t testing.TB, name, ns string, args ...string) string {
	t.Helper()
	out, err := helm(t, append([]string{"template", name, chartDir, "--namespace", ns, "--include-crds", "--skip-tests"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderKustomize renders config/default.
func renderKustomize(t testing.TB) string {
	t.Helper()
	out, err := run(context.Background(), nil, filepath.Join(kubebuilderAssets(t), "kubectl"), "kustomize", "config/default")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func kubebuilderAssets(t testing.TB) string {
	dir := harness.ControlPlaneDir()
	if _, err := os.Stat(filepath.Join(dir, "kubectl")); err != nil {
		t.Fatalf("no kubectl in %s: run 'make control-plane' first", dir)
	}
	return dir
}

// decode splits a multi-document YAML stream into objects.
func decode(t testing.TB, manifests string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decode manifests: %v", err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// find returns the object of the kind and name, failing the test when there
// is none.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among the rendered objects", kind, name)
	return nil
}
