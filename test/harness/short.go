package harness

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// What a test needs that go test -short leaves out: each names a real
// server or process that the test starts or talks to.
const (
	// ControlPlane is kube-apiserver and etcd (envtest), built by
	// make control-plane.
	ControlPlane = "a control plane (kube-apiserver and etcd; make control-plane)"
	// PostgreSQL is a PostgreSQL server that hack/postgres.sh starts.
	PostgreSQL = "a PostgreSQL server (apt-get install postgresql, or FENCEDLEASE_TEST_POSTGRES_DSN)"
	// S3Server is versitygw, the S3 server of the storage tests.
	S3Server = "an S3 server (versitygw; make versitygw)"
	// Binaries is the commands that the test builds with go build and runs
	// as processes.
	Binaries = "the project's commands built and run as processes"
)

// Short reports whether the tests run with -short. TestMain calls it before
// it starts anything: it parses the flags first, which m.Run would do later.
func Short() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}

// Needs skips t under -short, saying what it needs (one of the constants
// above). Integration tests call it before they touch their servers, so
// that go test -short ./... runs only the tests that need none of them.
func Needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped with -short", what)
	}
}

// RunNone is the TestMain of a package whose every test needs what, under
// -short: it runs no test and says why, and returns the exit code for
// os.Exit (go test reports the package with "[no tests to run]").
//
//	if harness.Short() {
//		os.Exit(harness.RunNone(m, harness.ControlPlane))
//	}
func RunNone(m *testing.M, what string) int {
	fmt.Fprintf(os.Stderr, "every test of this package needs %s: none run with -short\n", what)
	if err := flag.Set("test.run", "^$"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
