//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// controlPlane is what a run plays on: envtest's kube-apiserver and etcd (the
// default), or the HA control plane of test/cluster (CHAOS_CONTROL_PLANE=ha:
// three etcd members, two API servers behind a balancer, and faults of its
// own).
type controlPlane struct {
	// name is "envtest" or "ha", for the log and the summary.
	name string
	env  *testenv.Env
	// breakGlass creates the protected objects; cleanup deletes as the
	// garbage collector (see world.cleanup).
	breakGlass, cleanup client.Client
	// follow feeds the history's and the holder checker's watches.
	follow testenv.FollowFunc
	// servers are the administrator's configurations for each API server.
	servers []*rest.Config
	// ha is the HA control plane, nil on envtest.
	ha *cluster.Cluster
	// podConfig is the administrator's configuration for the API server
	// that a pod's holder process talks to (with its own token).
	podConfig func(pod string) *rest.Config
	// operatorConfig is the configuration of the n-th operator replica
	// started (1, 2, …), made from the operator's own.
	operatorConfig func(base *rest.Config, n int, primary bool) *rest.Config
	// ready, if set, waits until the control plane is ready for the run
	// once the primary operator serves the webhooks.
	ready func(ctx context.Context) error
	// faults, if set, injects the control plane's own faults until the
	// deadline, beside the run's injector, and waits until they have
	// healed; faultKinds lists their kinds.
	faults     func(ctx context.Context, w *world, until time.Time) error
	faultKinds []string
}

// garbageCollector is the user the cleanup client acts as: the admission
// policy lets the garbage collector delete a FencedLease's Lease.
const garbageCollector = "system:serviceaccount:kube-system:generic-garbage-collector"

// injectAll runs the run's injector and, beside it, the control plane's
// faults, until the deadline and until every fault has healed.
func injectAll(ctx context.Context, w *world, ops *operators, until time.Time) error {
	done := make(chan error, 1)
	if w.cp.faults != nil {
		go func() { done <- w.cp.faults(ctx, w, until) }()
	} else {
		done <- nil
	}
	err := newInjector(w, ops).run(ctx, until)
	if cpErr := <-done; cpErr != nil {
		err = errors.Join(err, fmt.Errorf("%s control plane: %w", w.cp.name, cpErr))
	}
	return err
}

// podToken is a token bound to the pod, from the TokenRequest API; a request
// that a fail-over cuts off is sent again.
func (w *world) podToken(pod *corev1.Pod) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		token, err := testenv.PodToken(w.ctx, w.env.Config, pod)
		if err == nil || !testenv.Transient(err) || time.Now().After(deadline) {
			return token, err
		}
		sleep(w.ctx, 200*time.Millisecond)
	}
}

// podClient is a client that acts as the pod (with a token bound to it), on
// the API server the control plane gives the pod's holder process.
func (w *world) podClient(pod *corev1.Pod) (client.Client, error) {
	token, err := w.podToken(pod)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(w.cp.podConfig(pod.Name))
	cfg.BearerToken = token
	return client.New(cfg, client.Options{Scheme: setup.Scheme()})
}

// controlPlaneKind is CHAOS_CONTROL_PLANE: "" or "envtest", or "ha".
func controlPlaneKind() (string, error) {
	switch k := os.Getenv("CHAOS_CONTROL_PLANE"); k {
	case "", "envtest":
		return "envtest", nil
	case "ha":
		return "ha", nil
	default:
		return "", fmt.Errorf("CHAOS_CONTROL_PLANE=%q: want envtest or ha", k)
	}
}

// startControlPlane starts the control plane CHAOS_CONTROL_PLANE names; the
// test's cleanup stops it.
func startControlPlane(ctx context.Context, t *testing.T) (*controlPlane, error) {
	kind, err := controlPlaneKind()
	if err != nil {
		return nil, err
	}
	if kind == "ha" {
		return startHA(ctx, t)
	}
	env, err := testenv.Start(testenv.WithWebhooks())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = env.Stop() })
	cp := &controlPlane{name: kind, env: env, servers: []*rest.Config{env.Config},
		podConfig:      func(string) *rest.Config { return env.Config },
		operatorConfig: func(base *rest.Config, _ int, _ bool) *rest.Config { return base },
	}
	if cp.breakGlass, err = testenv.UserClient(env, breakGlassUser, "system:masters"); err != nil {
		return nil, err
	}
	if cp.cleanup, err = testenv.UserClient(env, garbageCollector, "system:masters"); err != nil {
		return nil, err
	}
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		return nil, err
	}
	cp.follow = func(ctx context.Context, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error {
		return testenv.Follow(ctx, watcher, ns, list, gap, handle)
	}
	return cp, nil
}

// fencingOff is CHAOS_FENCING=off, a switch for the sanity run that shows
// the checks can fail: the fencing webhook's configuration is deleted once
// the run is set up, so that nothing checks a fence any more (the operator
// still grants, publishes and serves its webhook; no API server calls it).
// Such a run must report violations.
func fencingOff() bool { return os.Getenv("CHAOS_FENCING") == "off" }

// disableFencing deletes the fencing webhook's configuration and waits until
// no API server calls it: an unfenced protected write is admitted.
func disableFencing(ctx context.Context, cp *controlPlane) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fencedlease-fencing"}}
	if err := cp.env.Client.Delete(ctx, vwc); err != nil {
		return fmt.Errorf("delete ValidatingWebhookConfiguration %s: %w", vwc.Name, err)
	}
	for i, cfg := range cp.servers {
		c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
		if err != nil {
			return err
		}
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "unfenced-probe-",
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "probe"}}}
		if err := waitFor(ctx, time.Minute, func() error { return c.Create(ctx, probe.DeepCopy(), client.DryRunAll) }); err != nil {
			return fmt.Errorf("API server %d still calls the fencing webhook: %w", i, err)
		}
	}
	return nil
}
