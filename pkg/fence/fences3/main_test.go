package fences3_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/s3server"
)

// srv is the real S3 server of these tests (versitygw, POSIX backend).
var srv *s3server.Server

var bucketSeq atomic.Int64

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.S3Server))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fences3")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if srv, err = s3server.Start(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: these tests need a real S3 server:", err)
		return 1
	}
	defer srv.Stop()
	return m.Run()
}

// newBucket creates a bucket of its own for a test.
func newBucket(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("fences3-%d", bucketSeq.Add(1))
	if err := srv.CreateBucket(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return name
}
