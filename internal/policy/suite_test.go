package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/policy"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env *testenv.Env
	// operatorConfig acts as the operator's service account, with the
	// generated RBAC.
	operatorConfig *rest.Config
)

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond

	// breakGlassUser and breakGlassGroup are rendered into the policy, as
	// Helm or kustomize would from the install's values.
	breakGlassUser  = "bob"
	breakGlassGroup = "sre:break-glass"
)

// TestMain starts the control plane, sets up the operator's identity and
// installs the policy of config/policy with break-glass principals
// rendered in. The built-in edit role is extended to FencedLeases, as
// clusters often extend it to custom resources, so that RBAC lets a
// namespace editor try everything and only the policy stands in the way.
func TestMain(m *testing.M) {
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		if operatorConfig, err = testenv.OperatorConfig(ctx, e); err != nil {
			return err
		}
		rendered, err := renderPolicy(map[string]string{
			"breakGlassUsers":  "['" + breakGlassUser + "']",
			"breakGlassGroups": "['" + breakGlassGroup + "']",
		})
		if err != nil {
			return err
		}
		if err := testenv.InstallPolicies(ctx, e.Client, rendered); err != nil {
			return err
		}
		return e.Client.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "test-fencedleases-edit", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
				Resources: []string{"fencedleases", "fencedleases/status"}, Verbs: []string{"*"}}},
		})
	})
}

// renderPolicy writes config/policy/operator-state.yaml with the given
// variables' expressions replaced, to a temporary file.
func renderPolicy(vars map[string]string) (string, error) {
	data, err := os.ReadFile(testenv.PolicyFiles()[0])
	if err != nil {
		return "", err
	}
	s := string(data)
	for name, expr := range vars {
		old := "- name: " + name + "\n    expression: \"[]\""
		if !strings.Contains(s, old) {
			return "", os.ErrNotExist
		}
		s = strings.Replace(s, old, "- name: "+name+"\n    expression: \""+expr+"\"", 1)
	}
	dir, err := os.MkdirTemp("", "policy")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "operator-state.yaml")
	return path, os.WriteFile(path, []byte(s), 0o600)
}

// caller is someone who tries to write the operator's state.
type caller struct {
	// who names the caller in test output.
	who  string
	user string
	c    client.Client
}

// fixture is a namespace with a FencedLease "db" held by pod a, a standby
// b, the operator running as its service account, and the callers.
type fixture struct {
	t   *testing.T
	g   Gomega
	ctx context.Context
	ns  string
	// c is an administrator's client for setting up and checking.
	c client.Client
	// operator acts as the operator's service account.
	operator client.Client
	a, b     *corev1.Pod
	fence    int64
	// standby (pod b, with its bound token), editor (bound to edit in the
	// namespace) and admin (a cluster administrator who is not the operator).
	standby, editor, admin caller
}

var appLabels = map[string]string{"app": "singleton"}

// newFixture sets up a fixture for a test that runs in parallel with others.
func newFixture(t *testing.T) *fixture {
	t.Parallel()
	return newSerialFixture(t)
}

// newSerialFixture sets up a fixture for a test that runs alone, as one
// that installs a cluster-wide policy must.
func newSerialFixture(t *testing.T) *fixture {
	harness.Needs(t, harness.ControlPlane)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "pol")
	g.Expect(err).NotTo(HaveOccurred())
	f := &fixture{t: t, g: g, ctx: ctx, ns: ns, c: env.Client}
	f.operator, err = client.New(operatorConfig, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	// The workload's service account may write pods, Leases and FencedLeases
	// as far as RBAC goes: the policy alone says no.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "list", "create", "update", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}},
			{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases", "fencedleases/status"}, Verbs: []string{"*"}},
		},
	}
	g.Expect(f.c.Create(ctx, role)).To(Succeed())
	g.Expect(f.c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "workload"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	})).To(Succeed())

	m, err := testenv.StartManager(ctx, operatorConfig, testenv.ManagerOptions{Namespace: ns})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Stop() })
	g.Expect(f.c.Create(ctx, testenv.FencedLease(ns, "db", appLabels, nil))).To(Succeed())
	f.a = f.readyPod("a", time.Hour)
	f.b = f.readyPod("b", time.Minute)
	f.fence = f.waitHolder("a")

	sb, err := testenv.PodClient(ctx, env.Config, f.b)
	g.Expect(err).NotTo(HaveOccurred())
	f.standby = caller{who: "standby", user: "system:serviceaccount:" + ns + ":default", c: sb}
	ed, err := testenv.NamespaceEditor(ctx, env, ns, "erin")
	g.Expect(err).NotTo(HaveOccurred())
	f.editor = caller{who: "namespace editor", user: "erin", c: ed}
	f.admin = caller{who: "administrator", user: "mallory", c: f.user("mallory")}
	return f
}

func (f *fixture) callers() []caller { return []caller{f.standby, f.editor, f.admin} }

// user is a client that authenticates as name (and the given groups), with
// every permission RBAC can give.
func (f *fixture) user(name string, groups ...string) client.Client {
	c, err := testenv.UserClient(env, name, append(groups, "system:masters")...)
	f.g.Expect(err).NotTo(HaveOccurred())
	return c
}

func (f *fixture) readyPod(name string, readyFor time.Duration) *corev1.Pod {
	return f.readyPodWith(name, appLabels, readyFor)
}

func (f *fixture) readyPodWith(name string, labels map[string]string, readyFor time.Duration) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: labels, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

// waitHolder waits until the operator, as its service account and under
// the policy, has recorded and published pod as the holder; it returns the
// fence.
func (f *fixture) waitHolder(pod string) int64 {
	var fence int64
	f.g.Eventually(func(g Gomega) {
		fl := f.fencedLease()
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		g.Expect(fl.Status.Holder.PodName).To(Equal(pod))
		fence = fl.Status.Fence
		g.Expect(f.published(pod)).To(Equal([]string{fencingv1alpha1.RoleHolder, strconv.FormatInt(fence, 10), "db"}))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return fence
}

func (f *fixture) fencedLease() *fencingv1alpha1.FencedLease {
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
	return fl
}

// published is what a pod carries: its role, fence and lease annotations.
func (f *fixture) published(pod string) []string {
	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: pod}, p)).To(Succeed())
	return []string{p.Annotations[fencingv1alpha1.AnnotationRole], p.Annotations[fencingv1alpha1.AnnotationFence], p.Annotations[fencingv1alpha1.AnnotationLease]}
}

// retry runs a write that reads the object afresh until it is not refused
// for a conflict: the operator may write the object in between, and the
// answer under test is admission's.
func (f *fixture) retry(write func() error) error {
	var err error
	for range 20 {
		if err = write(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// expectDenied checks that the policy denied a request on the object
// (`pods "a"`, `leases.coordination.k8s.io "db"`...) with message.
func expectDenied(g Gomega, err error, object, message string) {
	g.ExpectWithOffset(1, err).To(MatchError(object + " is forbidden: ValidatingAdmissionPolicy '" + policy.OperatorState +
		"' with binding '" + policy.OperatorState + "' denied request: " + message))
	g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue())
}
