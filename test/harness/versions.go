package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// RepoRoot is the root of the repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// VersionsFile is where the versions of the binaries that hack/tools.sh
// builds are kept, one KEY=value a line.
func VersionsFile() string { return filepath.Join(RepoRoot(), "hack", "versions.env") }

// Versions reads VersionsFile.
func Versions() (map[string]string, error) {
	f, err := os.Open(VersionsFile())
	if err != nil {
		return nil, fmt.Errorf("read the versions: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%s:%d: %q is not KEY=value", VersionsFile(), n, line)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", VersionsFile(), err)
	}
	return out, nil
}

// Version is the value of key in VersionsFile. It panics when the file
// cannot be read or lacks the key: the checkout is broken, and every path
// built from it would be wrong.
func Version(key string) string {
	vs, err := Versions()
	if err != nil {
		panic(err)
	}
	v, ok := vs[key]
	if !ok {
		panic(fmt.Sprintf("%s has no %s", VersionsFile(), key))
	}
	return v
}

// ControlPlaneDir is the directory of kube-apiserver, etcd and kubectl (and
// of kube-controller-manager and kube-scheduler once make cluster-tools has
// built them): $KUBEBUILDER_ASSETS when set (make sets it), else
// bin/k8s/<K8S_VERSION> of the repository, where hack/tools.sh builds them.
func ControlPlaneDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin", "k8s", Version("K8S_VERSION"))
}

// Tool is bin/tools/<name>-<version> of the repository, where hack/tools.sh
// builds the tool name ("helm", "kwok", "versitygw", "controller-gen") at
// the version of <NAME>_VERSION.
func Tool(name string) string {
	key := strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_VERSION"
	return filepath.Join(RepoRoot(), "bin", "tools", name+"-"+Version(key))
}

// Kubelet is the real nodes' kubelet: $FENCEDLEASE_KUBELET, else
// bin/k8s/<K8S_VERSION>/kubelet (hack/tools.sh kubelet).
func Kubelet() string {
	if k := os.Getenv("FENCEDLEASE_KUBELET"); k != "" {
		return k
	}
	return filepath.Join(ControlPlaneDir(), "kubelet")
}

// ImagesDir holds the image tarballs of hack/tools/images (make images):
// $FENCEDLEASE_IMAGES, else bin/images.
func ImagesDir() string {
	if d := os.Getenv("FENCEDLEASE_IMAGES"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin", "images")
}
