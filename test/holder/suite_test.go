package holder_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env *testenv.Env
	// operator acts as the operator's service account: the admission policy
	// lets no one else write its state.
	operator *rest.Config
)

const timeout = 30 * time.Second

// TestMain starts the control plane with the admission policy of
// config/policy (so holder renewal goes through the same rule as in a
// cluster) and the workload ClusterRole of config/rbac.
func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.ControlPlane))
	}
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		if operator, err = testenv.OperatorConfig(ctx, e); err != nil {
			return err
		}
		if err := testenv.InstallPolicies(ctx, e.Client, testenv.PolicyFiles()[0]); err != nil {
			return err
		}
		role, err := testenv.WorkloadRole()
		if err != nil {
			return err
		}
		return e.Client.Create(ctx, role)
	})
}

// fixture is a namespace whose default service account may renew its Leases
// (the workload ClusterRole bound), a running operator, and a holder
// checker.
type fixture struct {
	t       *testing.T
	g       Gomega
	ctx     context.Context
	ns      string
	c       client.Client
	checker *testenv.HolderChecker
}

func newFixture(t *testing.T) *fixture {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "holder")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fencedlease-workload"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	})).To(Succeed())
	checker, err := testenv.WatchHolders(ctx, env.Config, ns)
	g.Expect(err).NotTo(HaveOccurred())
	f := &fixture{t: t, g: g, ctx: ctx, ns: ns, c: env.Client, checker: checker}
	t.Cleanup(func() { g.Expect(checker.Violations()).To(BeEmpty()) })
	m, err := testenv.StartManager(ctx, operator, testenv.ManagerOptions{Namespace: ns})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })
	return f
}

var labels = map[string]string{"app": "singleton"}

// fencedLease creates FencedLease db with holder renewal.
func (f *fixture) fencedLease(mutate func(*fencingv1alpha1.FencedLease)) {
	f.g.Expect(f.c.Create(f.ctx, testenv.FencedLease(f.ns, "db", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 4
		if mutate != nil {
			mutate(fl)
		}
	}))).To(Succeed())
}

func (f *fixture) readyPod(name string, readyFor time.Duration) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: labels, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

// session starts the pod's Session, acting with its own bound token.
func (f *fixture) session(pod *corev1.Pod, api func(*fence.APIConfig)) *fence.Session {
	return f.sessionWith(pod, api, nil)
}

// sessionWith is session with the session's configuration changed too.
func (f *fixture) sessionWith(pod *corev1.Pod, api func(*fence.APIConfig), config func(*fence.SessionConfig)) *fence.Session {
	token, err := testenv.PodToken(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	cfg := &fence.APIConfig{Host: env.Config.Host, CAData: env.Config.CAData, Token: func() (string, error) { return token, nil }}
	if api != nil {
		api(cfg)
	}
	sc := fence.SessionConfig{API: cfg, Namespace: f.ns, Lease: "db",
		Margin: 500 * time.Millisecond, Logf: func(format string, args ...any) { f.t.Logf(pod.Name+": "+format, args...) }}
	if config != nil {
		config(&sc)
	}
	var s *fence.Session
	f.g.Eventually(func() error {
		s, err = fence.NewSession(f.ctx, sc)
		return err
	}).WithTimeout(timeout).Should(Succeed(), "the Lease exists")
	f.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (f *fixture) status() fencingv1alpha1.FencedLeaseStatus {
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
	return fl.Status
}
