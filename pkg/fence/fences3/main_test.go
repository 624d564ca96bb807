package fences3_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/fencedlease/fencedlease/pkg/fence/fences3"
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

// proxied is a bucket of a test's own with two stores of it: slow reaches
// the S3 server through proxy, which loses or holds the requests the test
// picks; direct reaches it directly.
type proxied struct {
	bucket       string
	proxy        *s3server.DropProxy
	slow, direct *fences3.Store
}

func newProxied(t *testing.T) proxied {
	t.Helper()
	bucket := newBucket(t)
	proxy := s3server.NewDropProxy(srv.Endpoint)
	t.Cleanup(proxy.Close)
	return proxied{bucket: bucket, proxy: proxy, slow: fences3.New(srv.Client(proxy.URL), bucket), direct: fences3.New(srv.Client(""), bucket)}
}

// putLater runs st's Put of key in the background; its error comes on the
// channel returned.
func putLater(ctx context.Context, st *fences3.Store, op string, fence int64, content string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := st.Put(ctx, key, op, fence, body(content))
		done <- err
	}()
	return done
}
