package podinject_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond

	// sidecarLabel asks the test's second mutating webhook, which the API
	// server calls after the pod webhook, to add a container "sidecar".
	sidecarLabel = "test.fencedlease.io/sidecar"
	sidecarPath  = "/test-add-sidecar"
)

// TestMain starts kube-apiserver and etcd with the real config/webhook
// manifests and one operator that serves the webhooks (without the
// controller: the readiness test starts its own). Under -short it starts
// nothing, and the tests that need them skip.
func TestMain(m *testing.M) {
	testenv.SetLogger()
	if harness.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	env, err = testenv.Start(testenv.WithWebhooks(), withSidecarWebhook)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := testenv.StartManager(ctx, env.Config, testenv.ManagerOptions{
		Webhooks:     &env.WebhookInstallOptions,
		NoController: true,
		Register: func(mgr ctrl.Manager) error {
			mgr.GetWebhookServer().Register(sidecarPath, &webhook.Admission{Handler: admission.HandlerFunc(addSidecar)})
			return nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgr.Stop() }()
	return m.Run()
}

// withSidecarWebhook installs a second mutating webhook that the API server
// calls after the pod webhook (configurations are called in name order). It
// adds a container to labelled pods, as a service-mesh injector would, so
// that the pod webhook must be re-invoked to mount the token files in it.
func withSidecarWebhook(te *envtest.Environment) {
	te.WebhookInstallOptions.MutatingWebhooks = append(te.WebhookInstallOptions.MutatingWebhooks, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-test-sidecar"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sidecar.test.fencedlease.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Name: "webhook-service", Namespace: "system", Path: ptr.To(sidecarPath),
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			ObjectSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{sidecarLabel: "true"}},
			SideEffects:        ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	})
}

func addSidecar(_ context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "sidecar" {
			return admission.Allowed("")
		}
	}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar", Image: "registry.example/sidecar:1"})
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// fixture is one test's namespace and a client that records the warnings
// the API server returns.
type fixture struct {
	t   *testing.T
	g   Gomega
	ctx context.Context
	ns  string
	c   client.Client
	w   *warnings
}

func newFixture(t *testing.T) *fixture {
	harness.Needs(t, harness.ControlPlane)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "inject")
	g.Expect(err).NotTo(HaveOccurred())
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return &fixture{t: t, g: g, ctx: ctx, ns: ns, c: c, w: w}
}

// warnings records the warnings of API responses.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings recorded since the last call.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

var appLabels = map[string]string{"app": "singleton"}

// injectLabels are the labels of a candidate pod that opts in.
func injectLabels(extra ...string) map[string]string {
	l := map[string]string{"app": "singleton", fencingv1alpha1.LabelInject: "true"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

func (f *fixture) fencedLease(name string, mutate func(*fencingv1alpha1.FencedLease)) *fencingv1alpha1.FencedLease {
	f.t.Helper()
	fl := testenv.FencedLease(f.ns, name, appLabels, mutate)
	f.g.Expect(f.c.Create(f.ctx, fl)).To(Succeed())
	return fl
}

// createPod creates a pod through the recording client, with containers
// "app" and "helper" and an init container "init"; the returned pod is what
// the API server stored.
func (f *fixture) createPod(name string, labels map[string]string, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	return testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: labels, Mutate: func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "registry.example/init:1"}}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "helper", Image: "registry.example/helper:1"})
		if mutate != nil {
			mutate(p)
		}
	}})
}
