package s3server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencedlease/fencedlease/test/harness"
)

// BinaryEnv names the versitygw binary; make test sets it.
const BinaryEnv = "FENCEDLEASE_VERSITYGW"

// Region is the region the server is started with; requests must be signed
// for it.
const Region = "us-east-1"

// Server is a running versitygw.
type Server struct {
	// Endpoint is its base URL, http://127.0.0.1:<port>.
	Endpoint string
	// AccessKey and SecretKey are its root credentials.
	AccessKey, SecretKey string
	// Dir is the directory of its buckets.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
	stop   sync.Once
	out    *harness.SyncBuffer
}

// Binary returns the path of the versitygw binary: $FENCEDLEASE_VERSITYGW,
// else bin/tools/versitygw-<VERSITYGW_VERSION of hack/versions.env> of the
// repository.
func Binary() (string, error) {
	path := os.Getenv(BinaryEnv)
	if path == "" {
		path = harness.Tool("versitygw")
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no S3 server binary at %s: run 'make versitygw' (or 'make test'), or set %s: %w", path, BinaryEnv, err)
	}
	return path, nil
}

// Start starts versitygw on a free loopback port with a fresh directory
// under dir, and waits until it answers.
func Start(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(dir, "s3-")
	if err != nil {
		return nil, err
	}
	port, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "fencedlease-test",
		SecretKey: "fencedlease-test-secret",
		Dir:       root,
		exited:    make(chan struct{}),
		out:       &harness.SyncBuffer{Max: 1 << 20},
	}
	s.cmd = exec.Command(bin, "--port", "127.0.0.1:"+strconv.Itoa(port), "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", Region, "--quiet", "posix", root)
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(30 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls until the server answers HTTP.
func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited at start:\n%s", s.out.String())
		default:
		}
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("versitygw did not answer on %s within %s:\n%s", s.Endpoint, timeout, s.out.String())
}

// Stop ends the server and removes its directory.
func (s *Server) Stop() {
	s.stop.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		_ = os.RemoveAll(s.Dir)
	})
}

// Output is what the server printed.
func (s *Server) Output() string { return s.out.String() }

// Credentials are the server's root credentials for the AWS SDK.
func (s *Server) Credentials() aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey, Source: "s3server"}, nil
	})
}

// Client returns an S3 client of the server (path-style addressing),
// sending to endpoint instead when it is not empty (a proxy in front).
func (s *Server) Client(endpoint string) *s3.Client {
	if endpoint == "" {
		endpoint = s.Endpoint
	}
	return s3.New(s3.Options{Region: Region, BaseEndpoint: aws.String(endpoint), UsePathStyle: true, Credentials: s.Credentials()})
}

// CreateBucket creates a bucket.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.Client("").CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}
