package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionsMatchTheToolsModules: the binaries built from the modules of
// hack/tools/<name> (go build there takes the version from go.mod) are the
// versions that hack/versions.env names, which name their directories in
// bin/; a version changed in one place only would build one release into a
// directory named for another.
func TestVersionsMatchTheToolsModules(t *testing.T) {
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ dir, module, key, prefix string }{
		{"k8s", "k8s.io/kubernetes", "K8S_VERSION", "v"},
		{"etcd", "go.etcd.io/etcd/server/v3", "ETCD_VERSION", "v"},
		{"etcd", "go.etcd.io/etcd/etcdctl/v3", "ETCD_VERSION", "v"},
		{"etcd", "go.etcd.io/etcd/etcdutl/v3", "ETCD_VERSION", "v"},
		{"kwok", "sigs.k8s.io/kwok", "KWOK_VERSION", ""},
		{"versitygw", "github.com/versity/versitygw", "VERSITYGW_VERSION", ""},
	} {
		data, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "tools", m.dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		want := m.prefix + vs[m.key]
		re := regexp.MustCompile(`(?m)^(?:require\s+|\s+)` + regexp.QuoteMeta(m.module) + `\s+(\S+)`)
		have := "nothing"
		if got := re.FindStringSubmatch(string(data)); got != nil {
			have = got[1]
		}
		if have != want {
			t.Errorf("hack/tools/%s/go.mod requires %s %s; hack/versions.env says %s=%s", m.dir, m.module, have, m.key, vs[m.key])
		}
	}
	for _, key := range []string{"HELM_VERSION", "CONTROLLER_GEN_VERSION", "GOLANGCI_LINT_VERSION"} {
		if !strings.HasPrefix(vs[key], "v") {
			t.Errorf("%s=%q: go install wants a module version such as v1.2.3", key, vs[key])
		}
	}
}

func TestTool(t *testing.T) {
	want := filepath.Join(RepoRoot(), "bin", "tools", "controller-gen-"+Version("CONTROLLER_GEN_VERSION"))
	if got := Tool("controller-gen"); got != want {
		t.Errorf("Tool(controller-gen) = %s, want %s", got, want)
	}
}
