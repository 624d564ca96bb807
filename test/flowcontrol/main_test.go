//go:build apf

package flowcontrol_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env *testenv.Env
	// operatorConfig acts as the operator's service account, with the RBAC
	// of config/rbac, as the chart installs it (release fencedlease in
	// fencedlease-system).
	operatorConfig *rest.Config
)

// serverLimits are the API server's concurrency limits: 60 seats in all
// instead of the default 600, shared by the priority levels in proportion
// to their shares (workload-low's 100 of 255 give it 24, the operator's 10
// give it 3: a tenth of what they get by default), so that a load of a few
// hundred goroutines fills them on two cores and APF, not only the CPU,
// decides who waits. The operator's 3 seats carry its 100 FencedLeases
// renewed every 2 s (50 Lease writes a second) on this machine.
var serverLimits = map[string]string{
	"max-requests-inflight":          "40",
	"max-mutating-requests-inflight": "20",
}

func TestMain(m *testing.M) {
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		operatorConfig, err = testenv.OperatorConfig(ctx, e)
		return err
	}, testenv.WithWebhooks(), testenv.WithAPIServerFlags(serverLimits))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}
