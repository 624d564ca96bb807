package protected_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env *testenv.Env
	// operatorConfig acts as the operator's service account, with the
	// generated RBAC: the operator runs as itself.
	operatorConfig *rest.Config
)

// The principals of the webhook in these tests.
const (
	operatorUser    = testenv.OperatorUser
	breakGlassGroup = "sre:break-glass"
	denied          = `admission webhook "protected.fencedlease.io" denied the request: `
)

var webhookOptions = setup.WebhookOptions{
	OperatorUsers:    []string{operatorUser},
	BreakGlassUsers:  []string{"bob"},
	BreakGlassGroups: []string{breakGlassGroup},
	ScaleGuard:       &testenv.ScaleGuard,
}

// TestMain starts the control plane with the webhook configurations of
// config/webhook and the admission policies of config/policy, so that the
// operator works under the same rules as in a cluster.
//
// The fencing webhook's configuration also lists, as a user would through
// webhooks.protectedResources and as the chart renders it (coverage.Rules:
// each resource with all its subresources): the custom resource Widget of
// testdata/crd, Deployments and StatefulSets, and the scale subresources of
// Widgets and Deployments
// (in a webhook of their own, without the objectSelector: a Scale carries
// no labels); and a resource the API server does not serve.
func TestMain(m *testing.M) {
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		if operatorConfig, err = testenv.OperatorConfig(ctx, e); err != nil {
			return err
		}
		if err := protectMore(ctx, e.Client); err != nil {
			return err
		}
		if err := testenv.InstallScaleGuard(ctx, e.Client); err != nil {
			return err
		}
		return testenv.InstallPolicies(ctx, e.Client, testenv.PolicyFiles()...)
	}, testenv.WithWebhooks(), func(te *envtest.Environment) {
		te.CRDDirectoryPaths = append(te.CRDDirectoryPaths, "testdata/crd")
	})
}

// The resources the tests' fencing webhook configuration lists besides
// ConfigMaps and Secrets.
var (
	moreRules = coverage.Rules([]coverage.Entry{
		{Group: "examples.fencedlease.io", Resources: []string{"widgets", "widgets/status"}},
		{Group: "gizmos.example.com", Resources: []string{"gizmos"}},
		{Group: "apps", Resources: []string{"deployments", "deployments/scale", "statefulsets"}},
	})
	scaleRules = []admissionregistrationv1.RuleWithOperations{
		rule("examples.fencedlease.io", []string{"widgets/scale"}, admissionregistrationv1.Update),
		rule("apps", []string{"deployments/scale"}, admissionregistrationv1.Update),
	}
)

func rule(group string, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.NamespacedScope
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources, Scope: &scope}}
}

// protectMore adds the rules above to the fencing webhook's configuration.
func protectMore(ctx context.Context, c client.Client) error {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, types.NamespacedName{Name: setup.DefaultFencingConfiguration}, cfg); err != nil {
		return err
	}
	hook := &cfg.Webhooks[0]
	hook.Rules = append(hook.Rules, moreRules...)
	scale := *hook.DeepCopy()
	scale.Name, scale.ObjectSelector, scale.Rules = "protected-scale.fencedlease.io", nil, scaleRules
	cfg.Webhooks = append(cfg.Webhooks, scale)
	if err := c.Update(ctx, cfg); err != nil {
		return err
	}
	// The webhook reads the object of a scale write, and the scale guard's
	// resync lists the labelled ones (as the chart grants it for the scale
	// subresources it lists).
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fencedlease-scale-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"examples.fencedlease.io"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list"}},
	}}
	if err := c.Create(ctx, role); err != nil {
		return err
	}
	return c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: testenv.OperatorNamespace, Name: testenv.OperatorServiceAccount}}})
}

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
)

// fixture is one test's namespace with the operator serving the webhooks.
// Tests do not run in parallel: the API server calls one webhook server.
type fixture struct {
	t   testing.TB
	g   Gomega
	ctx context.Context
	ns  string
	// c is an administrator that is no principal of the webhook: its writes
	// to protected objects need a fence like anyone's.
	c client.Client
	// operator authenticates with the operator's user name (and may do
	// anything RBAC allows): what the webhook lets the operator do. The
	// operator itself runs with operatorConfig.
	operator client.Client
}

func newFixture(t testing.TB) *fixture {
	harness.Needs(t, harness.ControlPlane)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "fw")
	g.Expect(err).NotTo(HaveOccurred())
	f := &fixture{t: t, g: g, ctx: ctx, ns: ns, c: env.Client}
	f.operator = f.user(operatorUser)
	// The pods' service account may write ConfigMaps and Secrets: RBAC lets
	// them, only the webhook stands in the way.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"},
				Verbs: []string{"get", "list", "create", "update", "patch", "delete", "deletecollection"}},
			{APIGroups: []string{"examples.fencedlease.io"}, Resources: []string{"widgets", "widgets/status", "widgets/scale"},
				Verbs: []string{"get", "list", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/scale", "deployments/status", "statefulsets", "statefulsets/status"},
				Verbs: []string{"get", "list", "create", "update", "patch", "delete"}},
		},
	}
	g.Expect(f.c.Create(ctx, role)).To(Succeed())
	g.Expect(f.c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	})).To(Succeed())
	return f
}

// user is a client that authenticates as name (and the given groups), with
// every permission RBAC can give.
func (f *fixture) user(name string, groups ...string) client.Client {
	au, err := env.AddUser(envtest.User{Name: name, Groups: append(groups, "system:masters")}, nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(au.Config(), client.Options{Scheme: setup.Scheme()})
	f.g.Expect(err).NotTo(HaveOccurred())
	return c
}

// operator is a running operator; Stop stops it once.
type operator struct {
	*testenv.Manager
	once sync.Once
	err  error
}

func (o *operator) Stop() error {
	o.once.Do(func() { o.err = o.Manager.Stop() })
	return o.err
}

// startOperator runs the operator (controller and webhooks, as cmd/manager
// wires them), as its own service account, until the test ends.
func (f *fixture) startOperator(o testenv.ManagerOptions) *operator {
	if o.Namespace == "" {
		o.Namespace = f.ns
	}
	if o.Webhooks == nil && o.Register == nil && !o.ReportProtection {
		o.Webhooks = &env.WebhookInstallOptions
		o.WebhookOptions = webhookOptions
	}
	m, err := testenv.StartManager(f.ctx, operatorConfig, o)
	f.g.Expect(err).NotTo(HaveOccurred())
	op := &operator{Manager: m}
	f.t.Cleanup(func() { _ = op.Stop() })
	return op
}

var appLabels = map[string]string{"app": "singleton"}

// fencedLease creates a FencedLease that hands over at once when the holder
// becomes ineligible (Immediate: correct only because writes are fenced,
// which is what these tests check).
func (f *fixture) fencedLease(name string) {
	f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, name, appLabels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	}))).To(Succeed())
}

// readyPod creates a candidate that has been ready for readyFor (the one
// ready the longest is granted first).
func (f *fixture) readyPod(name string, readyFor time.Duration) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: appLabels, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

// asPod is a client that acts as the pod, with a bound service-account token.
// holderAndStandby creates FencedLease "db" with pods a and b, a ready for
// longer so that it is granted first, and returns them, a's fence and a
// client acting as each.
func (f *fixture) holderAndStandby() (a, b *corev1.Pod, n int64, asA, asB client.Client) {
	f.fencedLease("db")
	a = f.readyPod("a", time.Hour)
	b = f.readyPod("b", time.Minute)
	n = f.waitHolder("db", "a", 0)
	return a, b, n, f.asPod(a), f.asPod(b)
}

func (f *fixture) asPod(pod *corev1.Pod) client.Client {
	c, err := testenv.PodClient(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	return c
}

// waitHolder waits until pod holds the FencedLease, published to the pod
// after the status records it, and returns the fence.
func (f *fixture) waitHolder(name, pod string, after int64) int64 {
	var fence int64
	f.g.Eventually(func(g Gomega) {
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		g.Expect(fl.Status.Holder.PodName).To(Equal(pod))
		g.Expect(fl.Status.Fence).To(BeNumerically(">", after))
		fence = fl.Status.Fence
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: pod}, p)).To(Succeed())
		g.Expect(p.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(strconv.FormatInt(fence, 10)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return fence
}

// protect makes obj a ConfigMap or Secret protected by lease; fence "" leaves the
// annotation out.
func protect[T client.Object](obj T, ns, name, lease, fence string) T {
	obj.SetNamespace(ns)
	obj.SetName(name)
	obj.SetLabels(map[string]string{fencingv1alpha1.LabelProtectedBy: lease})
	if fence != "" {
		obj.SetAnnotations(map[string]string{fencingv1alpha1.AnnotationFence: fence})
	}
	return obj
}

func (f *fixture) configMap(name, lease, fence, value string) *corev1.ConfigMap {
	cm := protect(&corev1.ConfigMap{}, f.ns, name, lease, fence)
	cm.Data = map[string]string{"value": value}
	return cm
}

func (f *fixture) secret(name, lease, fence, value string) *corev1.Secret {
	s := protect(&corev1.Secret{}, f.ns, name, lease, fence)
	s.Data = map[string][]byte{"value": []byte(value)}
	return s
}

func fenceOf(n int64) string { return strconv.FormatInt(n, 10) }

// writeCM updates a ConfigMap as c would after reading it: the value and the
// fence annotation change ("" removes it), the rest stays.
func (f *fixture) writeCM(c client.Client, name, fence, value string) error {
	cm := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, cm)).To(Succeed())
	setFence(cm, fence)
	cm.Data = map[string]string{"value": value}
	return c.Update(f.ctx, cm)
}

func (f *fixture) writeSecret(c client.Client, name, fence, value string) error {
	s := &corev1.Secret{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, s)).To(Succeed())
	setFence(s, fence)
	s.Data = map[string][]byte{"value": []byte(value)}
	return c.Update(f.ctx, s)
}

func setFence(obj client.Object, fence string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	if fence == "" {
		delete(a, fencingv1alpha1.AnnotationFence)
	} else {
		a[fencingv1alpha1.AnnotationFence] = fence
	}
	obj.SetAnnotations(a)
}

// stored returns the value and the fence annotation of a stored ConfigMap.
func (f *fixture) storedCM(name string) (string, string) {
	cm := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, cm)).To(Succeed())
	return cm.Data["value"], cm.Annotations[fencingv1alpha1.AnnotationFence]
}

func (f *fixture) storedSecret(name string) (string, string) {
	s := &corev1.Secret{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, s)).To(Succeed())
	return string(s.Data["value"]), s.Annotations[fencingv1alpha1.AnnotationFence]
}

// expectDenied checks that the webhook denied a request with message.
func (f *fixture) expectDenied(err error, message string) {
	f.t.Helper()
	f.g.Expect(err).To(MatchError(denied+message), "the webhook must deny with the exact message")
	f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a denial is 403 Forbidden: %v", err)
}

// events lists "reason: note" of the Events recorded for a FencedLease.
func (f *fixture) events(name string) []string { return f.eventsIn(f.ns, name) }

// eventsIn lists "reason: note" of the Events recorded for a FencedLease of
// a namespace.
func (f *fixture) eventsIn(namespace, name string) []string {
	var list eventsv1.EventList
	f.g.Expect(f.c.List(f.ctx, &list, client.InNamespace(namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "FencedLease" {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// webhookEvents lists "reason: note" of the Events that the webhook recorded
// for a FencedLease (the controller's own are left out).
func (f *fixture) webhookEvents(name string) []string {
	var out []string
	for _, e := range f.events(name) {
		if strings.HasPrefix(e, fencingv1alpha1.EventStaleWriteRejected+": ") || strings.HasPrefix(e, fencingv1alpha1.EventBreakGlass+": ") {
			out = append(out, e)
		}
	}
	return out
}
