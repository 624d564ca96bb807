//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// The HA control plane (CHAOS_CONTROL_PLANE=ha): three etcd members and two
// API servers of test/cluster, with the CRDs, webhook configurations and
// admission policies installed as on envtest. Who talks to which API
// server:
//
//   - the primary operator replica (controller and webhooks) goes through
//     the balancer, as a pod's in-cluster configuration goes through the
//     kubernetes Service: its one HTTP/2 connection lands on one API server
//     and moves to the other when that one fails;
//   - a second replica keeps to one API server, the next one to the other;
//   - each pod's holder process keeps to API server 0, API server 1 or the
//     balancer, by its name;
//   - the harness (faults, the holders' tokens) goes through the balancer,
//     and retries what a fail-over cuts off (testenv.RetryTransient);
//   - the history and the holder checker read etcd itself
//     (cluster.FollowStorage): an API server's watch cannot resume on a
//     restarted API server, whose watch cache starts anew.
//
// Both API servers call the primary's webhooks.
func startHA(ctx context.Context, t *testing.T) (*controlPlane, error) {
	dir, err := os.MkdirTemp("", "chaos-ha-")
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		bin = harness.ControlPlaneDir()
	}
	c, err := cluster.New(cluster.Config{Dir: dir, K8sBin: bin, HA: true, ControlPlaneOnly: true})
	if err != nil {
		return nil, err
	}
	if _, err := c.Up(ctx); err != nil {
		return nil, fmt.Errorf("start the HA control plane in %s: %w", dir, err)
	}
	t.Cleanup(func() {
		_ = c.Down()
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		} else {
			t.Logf("the HA control plane's logs are in %s/logs", dir)
		}
	})
	t.Logf("HA control plane: etcd members %d, API servers %d behind the balancer at %s (state in %s)",
		c.EtcdMembers(), c.APIServers(), c.RestConfig.Host, dir)
	if err := rest.LoadTLSFiles(c.RestConfig); err != nil {
		return nil, err
	}
	env, err := testenv.Start(testenv.WithWebhooks(), testenv.WithExistingCluster(c.RestConfig))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = env.Stop() })
	env.Client = testenv.RetryTransient(env.Client)
	// Each API server serves the CRD before the run starts.
	for i := range c.APIServers() {
		sc, err := client.New(c.APIServerConfig(i), client.Options{Scheme: setup.Scheme()})
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, time.Minute, func() error {
			return sc.List(ctx, &fencingv1alpha1.FencedLeaseList{}, client.InNamespace(metav1.NamespaceDefault))
		}); err != nil {
			return nil, fmt.Errorf("API server %d does not serve FencedLeases: %w", i, err)
		}
	}
	cp := &controlPlane{name: "ha", env: env, ha: c, follow: c.FollowStorage}
	for i := range c.APIServers() {
		cp.servers = append(cp.servers, c.APIServerConfig(i))
	}
	if cp.breakGlass, err = haUserClient(c, "chaos-break-glass", breakGlassUser); err != nil {
		return nil, err
	}
	if cp.cleanup, err = haUserClient(c, "chaos-garbage-collector", garbageCollector); err != nil {
		return nil, err
	}
	cp.podConfig = func(pod string) *rest.Config {
		h := fnv.New32a()
		_, _ = h.Write([]byte(pod))
		if i := int(h.Sum32() % 3); i < c.APIServers() {
			return c.APIServerConfig(i)
		}
		return env.Config
	}
	cp.operatorConfig = func(base *rest.Config, n int, primary bool) *rest.Config {
		if primary {
			return base
		}
		cfg := rest.CopyConfig(base)
		cfg.Host = c.APIServerConfig(n % c.APIServers()).Host
		return cfg
	}
	cp.ready = func(ctx context.Context) error { return haReady(ctx, c) }
	in := newHAInjector(c)
	cp.faults, cp.faultKinds = in.run, haFaultKinds()
	return cp, nil
}

// haUserClient is a client that authenticates as user in system:masters
// with a certificate of the cluster's CA, through the balancer, retrying
// what a fail-over cuts off.
func haUserClient(c *cluster.Cluster, name, user string) (client.Client, error) {
	cfg, err := c.UserConfig(name, user, "system:masters")
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	return testenv.RetryTransient(cl), nil
}

// haReady waits, once the primary operator serves the webhooks, until each
// API server calls them and enforces the admission policies: each has its
// own informers of their configurations.
func haReady(ctx context.Context, c *cluster.Cluster) error {
	for i := range c.APIServers() {
		sc, err := client.New(c.APIServerConfig(i), client.Options{Scheme: setup.Scheme()})
		if err != nil {
			return err
		}
		if err := testenv.InstallPolicies(ctx, sc, testenv.PolicyFiles()...); err != nil {
			return fmt.Errorf("API server %d: %w", i, err)
		}
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "webhook-probe-",
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "probe"}}}
		if err := waitFor(ctx, time.Minute, func() error {
			err := sc.Create(ctx, probe.DeepCopy(), client.DryRunAll)
			switch {
			case err == nil:
				return errors.New("the fencing webhook did not answer a protected write: it was admitted")
			case !strings.Contains(err.Error(), "denied the request"):
				return fmt.Errorf("the fencing webhook did not answer a protected write: %w", err)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("API server %d: %w", i, err)
		}
	}
	return nil
}

// waitFor polls f until it succeeds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
