package main

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestRunRefusesIncompleteConfiguration: the gateway does not start without
// its routes, its store or its store credentials, and says which is missing.
func TestRunRefusesIncompleteConfiguration(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	routes := filepath.Join(dir, "config.yaml")
	g.Expect(os.WriteFile(routes, []byte("routes:\n- bucket: reports\n  namespace: billing\n  fencedLease: exporter\n"), 0o600)).To(Succeed())
	bad := filepath.Join(dir, "bad.yaml")
	g.Expect(os.WriteFile(bad, []byte("routes:\n- bucket: reports\n  namespace: billing\n  fencedLease: exporter\n  prefx: typo/\n"), 0o600)).To(Succeed())
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")

	g.Expect(run(flags{config: filepath.Join(dir, "none.yaml")})).To(MatchError(ContainSubstring("read gateway configuration: open " + filepath.Join(dir, "none.yaml"))))
	g.Expect(run(flags{config: bad})).To(MatchError(ContainSubstring(`unknown field "prefx"`)))
	g.Expect(run(flags{config: routes})).To(MatchError("--upstream-endpoint is required"))
	g.Expect(run(flags{config: routes, upstream: "http://127.0.0.1:1"})).To(MatchError(
		"the upstream credentials are missing: set $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY"))
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	g.Expect(run(flags{config: routes, upstream: "s3.example.com"})).To(MatchError(`invalid upstream endpoint "s3.example.com": want http(s)://host[:port]`))
}
