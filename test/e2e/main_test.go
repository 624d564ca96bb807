//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	release   = "fencedlease"
	namespace = "fencedlease-system"
	// nodeGrace is the cluster's node-monitor grace period: short, so that
	// a node failure shows quickly.
	nodeGrace = 12 * time.Second
)

var (
	cl       *cluster.Cluster
	admin    client.Client
	install  *cluster.Install
	manager  string
	balancer *cluster.Balancer
	// operators are the two operator replicas, both serving the webhooks
	// behind balancer.
	operators [2]*cluster.Operator
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	testenv.SetLogger()
	root := testenv.RepoRoot()
	tmp, err := os.MkdirTemp("", "fencedlease-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	manager = filepath.Join(tmp, "manager")
	build := exec.Command("go", "build", "-o", manager, "./cmd/manager")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the manager: %v\n%s", err, out)
		return 1
	}
	kwok := os.Getenv("FENCEDLEASE_KWOK")
	if kwok == "" {
		kwok = harness.Tool("kwok")
	}
	helm := os.Getenv("FENCEDLEASE_HELM")
	if helm == "" {
		helm = harness.Tool("helm")
	}
	k8sBin := harness.ControlPlaneDir()
	cfg := cluster.Config{Dir: filepath.Join(tmp, "cluster"), K8sBin: k8sBin, Kwok: kwok, NodeMonitorGracePeriod: nodeGrace}
	realNodeConfig(&cfg)
	if cl, err = cluster.New(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	defer func() {
		if err := cl.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the cluster:", err)
		}
	}()
	if _, err := cl.Up(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start the cluster:", err)
		return 1
	}
	if admin, err = client.New(cl.RestConfig, client.Options{Scheme: setup.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if install, err = cl.InstallChart(ctx, helm, filepath.Join(root, "charts", "fencedlease"), release, namespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := startOperators(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		for _, o := range operators {
			if o != nil {
				fmt.Fprintf(os.Stderr, "operator %s log:\n%s\n", o.Name, o.Log())
			}
		}
		return 1
	}
	defer balancer.Close()
	return m.Run()
}

// startOperators runs two operator replicas, as the chart's two-replica
// Deployment would, with the webhook configurations calling them through
// one balancer address.
func startOperators(ctx context.Context) error {
	ports, err := harness.FreePorts(2)
	if err != nil {
		return err
	}
	if balancer, err = cluster.NewBalancer(fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])); err != nil {
		return err
	}
	if err := cl.PointWebhooks(ctx, install, fmt.Sprintf("localhost:%d", balancer.Port())); err != nil {
		return err
	}
	for i := range operators {
		if operators[i], err = cl.StartOperator(ctx, install, manager, fmt.Sprintf("e2e-%d", i), ports[i]); err != nil {
			return err
		}
	}
	return waitServing(ctx)
}

// waitServing waits until at least one operator replica is Ready: its
// webhook server serves with a certificate that the webhook configurations
// trust. TestWebhookReplicaDown requires both.
func waitServing(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, o := range operators {
			if o.Ready() == nil {
				return nil
			}
		}
		for _, o := range operators {
			if !o.Running() {
				return fmt.Errorf("operator %s exited:\n%s", o.Name, cl.Tail("operator-"+o.Name, 40))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no operator replica is Ready after 2 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
