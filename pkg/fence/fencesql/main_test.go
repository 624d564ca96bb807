package fencesql_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/test/harness"
)

// dsnEnv points the tests at an existing PostgreSQL server. When it is
// unset, TestMain starts a throwaway one with hack/postgres.sh.
const dsnEnv = "FENCEDLEASE_TEST_POSTGRES_DSN"

var dsn string

// runID and opSeq keep operation IDs apart across calls, repeated runs
// (-count) and earlier runs against the same server.
var (
	runID = time.Now().UnixNano()
	opSeq atomic.Int64
)

// opID returns a new operation ID, unique to this call.
func opID(t *testing.T, name string) string {
	return fmt.Sprintf("%s/%s/%d-%d", t.Name(), name, runID, opSeq.Add(1))
}

// TestMain starts PostgreSQL, or under -short nothing: then the tests that
// need it skip (backends) and the others run.
func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dsn = os.Getenv(dsnEnv)
	if dsn != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "fencesql-postgres")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "hack", "postgres.sh"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var stdout, stderr bytes.Buffer
	start := exec.Command(script, "start", dir)
	start.Stdout, start.Stderr = &stdout, &stderr
	if err := start.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: these tests need a real PostgreSQL server: set %s, or install PostgreSQL "+
			"(apt-get install postgresql) so that %s can start one.\n%s: %v\n%s", dsnEnv, script, script, err, &stderr)
		return 1
	}
	defer func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "stop PostgreSQL: %v\n%s", err, out)
		}
	}()
	dsn = strings.TrimSpace(stdout.String())
	return m.Run()
}
