package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

var (
	env *testenv.Env
	// operator acts as the operator's service account.
	operator *rest.Config
	// admin is an administrator's client that knows Widgets.
	admin  client.Client
	scheme = runtime.NewScheme()
)

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
	// widgetRole is the ClusterRole of examples/fenced-controller/config/rbac.
	widgetRole = "widget-controller"
)

func exampleDir() string { return filepath.Join(testenv.RepoRoot(), "examples", "fenced-controller") }

// TestMain starts the control plane with the example's CRD, the webhook
// configurations of config/webhook and the admission policies of
// config/policy, adds Widgets and their status to the resources the fencing
// webhook guards (protectWidgets), and installs the workload ClusterRole of
// config/rbac and the example's ClusterRole.
func TestMain(m *testing.M) {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fencingv1alpha1.AddToScheme, examplesv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	withExampleCRD := func(te *envtest.Environment) {
		te.CRDDirectoryPaths = append(te.CRDDirectoryPaths, filepath.Join(exampleDir(), "config", "crd"))
	}
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		if admin, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
			return err
		}
		if operator, err = testenv.OperatorConfig(ctx, e); err != nil {
			return err
		}
		if err := testenv.InstallPolicies(ctx, e.Client, testenv.PolicyFiles()...); err != nil {
			return err
		}
		if err := protectWidgets(ctx, e.Client); err != nil {
			return err
		}
		for name, file := range map[string]string{
			"fencedlease-workload": filepath.Join(testenv.RepoRoot(), "config", "rbac", "workload_role.yaml"),
			widgetRole:             filepath.Join(exampleDir(), "config", "rbac", "role.yaml"),
		} {
			if err := installClusterRole(ctx, e.Client, name, file); err != nil {
				return err
			}
		}
		return nil
	}, testenv.WithWebhooks(), withExampleCRD)
}

// protectWidgets adds a rule for Widgets and their status subresource to
// the fencing webhook's configuration that testenv.WithWebhooks installed
// from config/webhook, as a user lists the resources to protect in the
// chart's values or the kustomize patch.
func protectWidgets(ctx context.Context, c client.Client) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: setup.DefaultFencingConfiguration}, vwc); err != nil {
		return err
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].Rules = append(vwc.Webhooks[i].Rules, admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{examplesv1alpha1.GroupVersion.Group}, APIVersions: []string{examplesv1alpha1.GroupVersion.Version},
				Resources: []string{"widgets", "widgets/status"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		})
	}
	return c.Update(ctx, vwc)
}

func installClusterRole(ctx context.Context, c client.Client, name, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return err
	}
	role.Name = name
	return c.Create(ctx, role)
}

// fixture is a namespace whose default service account may renew its
// Leases and run the example controller.
type fixture struct {
	t   *testing.T
	g   Gomega
	ctx context.Context
	ns  string
}

var podLabels = map[string]string{"app": "widget-controller"}

func newFixture(t *testing.T) *fixture {
	harness.Needs(t, harness.ControlPlane)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, admin, "ctrl")
	g.Expect(err).NotTo(HaveOccurred())
	for _, role := range []string{"fencedlease-workload", widgetRole} {
		g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
		})).To(Succeed())
	}
	return &fixture{t: t, g: g, ctx: ctx, ns: ns}
}

// breakGlassUser is the break-glass user of the operator's fencing
// webhook: a person repairing protected objects (repairClient).
const breakGlassUser = "repair"

// startOperator runs the operator (controller and webhooks) as its own
// service account until the test ends.
func (f *fixture) startOperator() {
	m, err := testenv.StartManager(f.ctx, operator, testenv.ManagerOptions{Namespace: f.ns, Webhooks: &env.WebhookInstallOptions,
		WebhookOptions: setup.WebhookOptions{BreakGlassUsers: []string{breakGlassUser}}})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.t.Cleanup(func() { m.Crash(); m.Wait() })
}

// pod creates a candidate, not ready yet.
func (f *fixture) pod(name string) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, admin, testenv.Pod{Namespace: f.ns, Name: name, Labels: podLabels, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	return pod
}

// ready makes the pod ready since readyFor ago (the candidate ready the
// longest is granted first).
func (f *fixture) ready(pod *corev1.Pod, readyFor time.Duration) {
	f.g.Expect(testenv.SetReady(f.ctx, admin, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
}

// widgets creates n Widgets, w0 to w(n-1), unprotected: the controller
// protects them in its first write.
func (f *fixture) widgets(n int) {
	for i := range n {
		w := &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "w" + string(rune('0'+i))},
			Spec: examplesv1alpha1.WidgetSpec{Message: "hello"}}
		f.g.Expect(admin.Create(f.ctx, w)).To(Succeed())
	}
}

func (f *fixture) listWidgets(g Gomega) []examplesv1alpha1.Widget {
	var list examplesv1alpha1.WidgetList
	g.Expect(admin.List(f.ctx, &list, client.InNamespace(f.ns))).To(Succeed())
	return list.Items
}

// waitWidgets waits until every Widget's status was written by pod, with a
// fence above after (any fence when after < 0), and returns that fence.
func (f *fixture) waitWidgets(pod string, after int64, d time.Duration) int64 {
	var fenceValue int64
	f.g.Eventually(func(g Gomega) {
		items := f.listWidgets(g)
		g.Expect(items).NotTo(BeEmpty())
		for _, w := range items {
			g.Expect(w.Status.Holder).To(Equal(pod), "Widget %s", w.Name)
			g.Expect(w.Status.Fence).To(BeNumerically(">", after), "Widget %s", w.Name)
			g.Expect(w.Spec.Slot).NotTo(BeNil(), "Widget %s", w.Name)
			fenceValue = w.Status.Fence
		}
	}).WithTimeout(d).WithPolling(poll).Should(Succeed())
	return fenceValue
}
