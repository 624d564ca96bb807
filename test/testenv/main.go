package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencedlease/fencedlease/test/harness"
)

// SetLogger routes the operator's logs of a test binary: discarded, or to
// stderr with every level when FENCEDLEASE_TEST_LOG is set.
func SetLogger() {
	out := io.Discard
	if os.Getenv("FENCEDLEASE_TEST_LOG") != "" {
		out = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(out), zap.UseDevMode(true), zap.Level(zapcore.Level(-5)),
		func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }))
}

// Main is the TestMain of an integration test package: it sets the logger,
// starts the control plane into *env, runs the tests, stops the control plane
// and exits. Under go test -short it starts nothing and leaves *env nil: the
// package's unit tests run, and every test that needs the control plane
// skips (harness.Needs, which the suites' fixtures call).
func Main(m *testing.M, env **Env, opts ...func(*envtest.Environment)) {
	MainWithSetup(m, env, nil, opts...)
}

// MainWithSetup is Main with a step run once the control plane is up and
// before the tests, such as installing admission policies (InstallPolicies).
func MainWithSetup(m *testing.M, env **Env, setup func(context.Context, *Env) error, opts ...func(*envtest.Environment)) {
	SetLogger()
	if harness.Short() {
		os.Exit(m.Run())
	}
	e, err := Start(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if setup != nil {
		if err := setup(context.Background(), e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			_ = e.Stop()
			os.Exit(1)
		}
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop control plane:", err)
	}
	os.Exit(code)
}
