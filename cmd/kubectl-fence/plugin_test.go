package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env            *testenv.Env
	operatorConfig *rest.Config
)

// TestMain starts a control plane whose API server calls the webhooks over
// TLS; each test runs the operator as its own service account.
func TestMain(m *testing.M) {
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		operatorConfig, err = testenv.OperatorConfig(ctx, e)
		return err
	}, testenv.WithWebhooks())
}

const timeout = 30 * time.Second

var appLabels = map[string]string{"app": "singleton"}

// plugin is the plugin against the test's API server: a kubeconfig with a
// context whose namespace is the test's, and a context that points nowhere.
type plugin struct {
	t          *testing.T
	kubeconfig string
}

func newPlugin(t *testing.T, ns string) *plugin {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: ns}
	kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "admin"}
	kc.CurrentContext = "nowhere"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return &plugin{t: t, kubeconfig: file}
}

// as is the plugin acting as user (impersonated by the test's admin).
func (p *plugin) as(user string) *plugin {
	kc, err := clientcmd.LoadFromFile(p.kubeconfig)
	if err != nil {
		p.t.Fatal(err)
	}
	kc.AuthInfos["admin"].Impersonate = user
	file := filepath.Join(p.t.TempDir(), "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		p.t.Fatal(err)
	}
	return &plugin{t: p.t, kubeconfig: file}
}

// run runs kubectl fence with --kubeconfig and --context test.
func (p *plugin) run(args ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"--kubeconfig", p.kubeconfig, "--context", "test"}, args...), &out)
	return out.String(), err
}

type fixture struct {
	t   *testing.T
	g   Gomega
	ctx context.Context
	ns  string
	p   *plugin
}

func newFixture(t *testing.T) *fixture {
	return newFixtureWith(t, setup.Options{})
}

// newFixtureWith starts the operator with opts.
func newFixtureWith(t *testing.T, opts setup.Options) *fixture {
	harness.Needs(t, harness.ControlPlane)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewWithT(t)
	ns, err := testenv.Namespace(ctx, env.Client, "plugin")
	g.Expect(err).NotTo(HaveOccurred())
	m, err := testenv.StartManager(ctx, operatorConfig, testenv.ManagerOptions{
		Options:        opts,
		Namespace:      ns,
		Webhooks:       &env.WebhookInstallOptions,
		WebhookOptions: setup.WebhookOptions{OperatorUsers: []string{testenv.OperatorUser}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Stop() })
	return &fixture{t: t, g: g, ctx: ctx, ns: ns, p: newPlugin(t, ns)}
}

func (f *fixture) pod(name string, readyFor time.Duration) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, env.Client, testenv.Pod{Namespace: f.ns, Name: name, Labels: appLabels, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, env.Client, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

func (f *fixture) lease(name string, takeover fencingv1alpha1.TakeoverPolicy) {
	fl := testenv.FencedLease(f.ns, name, appLabels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 3
		fl.Spec.RenewIntervalSeconds = ptr.To[int32](1)
		fl.Spec.Takeover = takeover
	})
	f.g.Expect(env.Client.Create(f.ctx, fl)).To(Succeed())
}

// holder waits for a committed holder whose pod carries its fence.
func (f *fixture) holder(name string) (string, int64) {
	var pod string
	var fence int64
	f.g.Eventually(func(g Gomega) {
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: fl.Status.Holder.PodName}, p)).To(Succeed())
		g.Expect(p.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(strconv.FormatInt(fl.Status.Fence, 10)))
		pod, fence = fl.Status.Holder.PodName, fl.Status.Fence
	}).WithTimeout(timeout).Should(Succeed())
	return pod, fence
}

// TestStatus: the list shows holder, fence, expiry, renewal mode, takeover
// and state; one lease tells its story; the context's namespace, -n and -A
// choose where; the kubeconfig's current context is not used.
func TestStatus(t *testing.T) {
	f := newFixture(t)
	f.pod("a", time.Hour)
	f.pod("b", time.Minute)
	f.lease("db", fencingv1alpha1.TakeoverSafe)
	_, fence := f.holder("db")

	out, err := f.p.run("status")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(MatchRegexp(`(?m)^NAME\s+HOLDER\s+FENCE\s+EXPIRES\s+RENEWAL\s+TAKEOVER\s+CANDIDATES\s+STATE\n`))
	f.g.Expect(out).To(MatchRegexp(`(?m)^db\s+a\s+%d\s+[0-3]s\s+Operator\s+Safe\s+2\s+Granted\s*$`, fence))

	out, err = f.p.run("status", "-A")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(MatchRegexp(`(?m)^%s\s+db\s+a\s+%d\s`, f.ns, fence))

	out, err = f.p.run("status", "-n", "default")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(Equal("No FencedLeases in namespace default.\n"))

	out, err = f.p.run("status", "db")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(MatchRegexp(`FencedLease:\s+%s/db\n`, f.ns))
	f.g.Expect(out).To(MatchRegexp(`Holder:\s+pod a on node node-1, fence %d, granted \d+s ago\n`, fence))
	f.g.Expect(out).To(MatchRegexp(`Timing:\s+lease 3s, renewed every 1s by the operator\n`))
	f.g.Expect(out).To(MatchRegexp(`Held:\s+True \(Granted\): pod a holds the lease with fence %d\n`, fence))
	f.g.Expect(out).To(MatchRegexp(`(?m)^\s+a\s+holder\s+%d\s`, fence))
	f.g.Expect(out).To(MatchRegexp(`(?m)^\s+b\s+standby\s+-\s`))

	_, err = f.p.run("status", "nope")
	f.g.Expect(err).To(MatchError("FencedLease " + f.ns + "/nope not found"))
	var buf bytes.Buffer
	err = run(f.ctx, []string{"--kubeconfig", f.p.kubeconfig, "status"}, &buf)
	f.g.Expect(err).To(MatchError(ContainSubstring("127.0.0.1:1")), "without --context the kubeconfig's current context is used")
}

// TestStatusSaysTheLeaseIsDeleted: a deleted Lease stays while its grant
// is revoked and runs out; the story says so.
func TestStatusSaysTheLeaseIsDeleted(t *testing.T) {
	f := newFixture(t)
	f.pod("a", time.Hour)
	fl := testenv.FencedLease(f.ns, "db", appLabels, func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 60 })
	f.g.Expect(env.Client.Create(f.ctx, fl)).To(Succeed())
	f.holder("db")
	out, err := f.p.run("status", "db")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).NotTo(MatchRegexp(`(?m)^Lease:`))

	l := &coordinationv1.Lease{}
	f.g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, l)).To(Succeed())
	f.g.Expect(env.Client.Delete(f.ctx, l)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		out, err := f.p.run("status", "db")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`(?m)^Lease:\s+deleted \d+s ago; kept until its grant is over, then re-created\n`))
		g.Expect(out).To(MatchRegexp(`Held:\s+False \(WaitingForExpiry\)`))
	}).WithTimeout(timeout).Should(Succeed())
}

// TestStatusAllNamespacesReadsLeasesWhereTheFencedLeasesAre: a user who
// may list FencedLeases in every namespace but read Leases only in their own
// gets the time left from the Lease with -A too. The plugin reads Leases
// from the namespaces of the FencedLeases it lists, not from the whole
// cluster (one Lease per node in kube-node-lease, leader elections in
// kube-system), which that user may not list. The operator records a
// renewal alone in the status once an hour here, so after a lease duration
// the status alone says the grant expired.
func TestStatusAllNamespacesReadsLeasesWhereTheFencedLeasesAre(t *testing.T) {
	f := newFixtureWith(t, setup.Options{StatusRenewalInterval: time.Hour})
	f.pod("a", time.Hour)
	f.lease("db", fencingv1alpha1.TakeoverSafe)
	_, fence := f.holder("db")
	user := "viewer-" + f.ns
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"}, Verbs: []string{"list"}}}})).To(Succeed())
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}})
		_ = env.Client.Delete(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}})
	})
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list"}}}})).To(Succeed())
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "leases"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leases"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
	viewer := f.p.as(user)

	// The lease is 3 s. Once the status's expireTime is 2 s past, the status
	// alone says "expired 2s ago" or more, and only the Lease shows the
	// renewals. The status's expireTime never goes back, so one that far
	// past after the run was that far past during it.
	expiredBy := func(at time.Time) bool {
		fl := &fencingv1alpha1.FencedLease{}
		f.g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
		return fl.Status.ExpireTime != nil && fl.Status.ExpireTime.Add(2*time.Second).Before(at)
	}
	f.g.Eventually(func() bool { return expiredBy(time.Now()) }).WithTimeout(timeout).Should(BeTrue(), "the status alone says the grant expired")
	ran := time.Now()
	out, err := viewer.run("status", "-A")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(expiredBy(ran)).To(BeTrue(), "the status said the grant expired 2s before the plugin ran")
	f.g.Expect(out).To(MatchRegexp(`(?m)^%s\s+db\s+a\s+%d\s+[0-3]s\s`, f.ns, fence), "the time left from the Lease")
}

// TestHandoff: under Safe takeover the request revokes the holder's grant
// and the other candidate is granted with a higher fence once it expired;
// the request is handled once; alone, the holder keeps its grant and the
// plugin says why.
func TestHandoff(t *testing.T) {
	f := newFixture(t)
	f.pod("a", time.Hour)
	f.pod("b", time.Minute)
	f.lease("db", fencingv1alpha1.TakeoverSafe)
	from, fence := f.holder("db")
	f.g.Expect(from).To(Equal("a"))

	out, err := f.p.run("handoff", "db", "--timeout", "30s")
	f.g.Expect(err).NotTo(HaveOccurred(), out)
	f.g.Expect(out).To(ContainSubstring("Handoff started: pod a's grant is revoked; the next holder is granted once it expires (takeover Safe"))
	f.g.Expect(out).To(MatchRegexp(`Pod b holds FencedLease %s/db with fence \d+ \(was pod a, fence %d\)\n`, f.ns, fence))
	to, fence2 := f.holder("db")
	f.g.Expect(to).To(Equal("b"))
	f.g.Expect(fence2).To(BeNumerically(">", fence))

	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
	f.g.Expect(fl.Status.LastHandledHandoffAt).To(Equal(fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt]))
	// Handled once: b keeps the lease over several lease durations.
	f.g.Consistently(func() string { p, _ := f.holder("db"); return p }).WithTimeout(4 * time.Second).Should(Equal("b"))
	f.g.Expect(f.events("db")).To(ContainElement(fencingv1alpha1.EventRotated))

	// Alone: refused, and b keeps its grant.
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, env.Client, podRef(f.ns, "a"))).To(Succeed())
	f.g.Eventually(func() int32 {
		_ = env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)
		return fl.Status.Candidates
	}).WithTimeout(timeout).Should(BeEquivalentTo(1))
	out, err = f.p.run("handoff", "db", "--timeout", "30s")
	f.g.Expect(err).To(MatchError(MatchRegexp(`^handoff refused: Handoff requested at \S+ not done: no other candidate is eligible; the holder keeps its grant$`)), out)
	p, fence3 := f.holder("db")
	f.g.Expect(p).To(Equal("b"))
	f.g.Expect(fence3).To(Equal(fence2))

	_, err = f.p.run("handoff", "nope")
	f.g.Expect(err).To(MatchError("FencedLease " + f.ns + "/nope not found"))
}

// TestHandoffImmediate: under Immediate takeover the other candidate is
// granted at once.
func TestHandoffImmediate(t *testing.T) {
	f := newFixture(t)
	f.pod("a", time.Hour)
	f.pod("b", time.Minute)
	f.lease("db", fencingv1alpha1.TakeoverImmediate)
	_, fence := f.holder("db")
	out, err := f.p.run("handoff", "db")
	f.g.Expect(err).NotTo(HaveOccurred(), out)
	f.g.Expect(out).To(ContainSubstring("another candidate is granted at once (takeover Immediate)"))
	to, fence2 := f.holder("db")
	f.g.Expect(to).To(Equal("b"))
	f.g.Expect(fence2).To(BeNumerically(">", fence))
}

// TestExplainDenial: a real denial from the API server is explained, and so
// is the protection of a ConfigMap.
func TestExplainDenial(t *testing.T) {
	f := newFixture(t)
	a := f.pod("a", time.Hour)
	b := f.pod("b", time.Minute)
	f.lease("db", fencingv1alpha1.TakeoverSafe)
	_, fence := f.holder("db")
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}}}})).To(Succeed())
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "default"}}})).To(Succeed())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "config",
		Labels:      map[string]string{fencingv1alpha1.LabelProtectedBy: "db"},
		Annotations: map[string]string{fencingv1alpha1.AnnotationFence: strconv.FormatInt(fence, 10)}}}
	holderClient, err := testenv.PodClient(f.ctx, env.Config, a)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(holderClient.Create(f.ctx, cm)).To(Succeed())
	standby, err := testenv.PodClient(f.ctx, env.Config, b)
	f.g.Expect(err).NotTo(HaveOccurred())
	denied := standby.Update(f.ctx, cm)
	f.g.Expect(denied).To(HaveOccurred())

	out, err := f.p.run("explain-denial", denied.Error())
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(HavePrefix("Reason:  not_holder\nWhy:     the writer is a pod, but not the current holder"))

	out, err = f.p.run("explain-denial", "configmap/config")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(Equal("ConfigMap " + f.ns + "/config is protected by FencedLease \"db\"; last written with fence " + strconv.FormatInt(fence, 10) + ".\n" +
		"Only pod a, the holder, may write it now, with the annotation fencedlease.io/fence: \"" + strconv.FormatInt(fence, 10) +
		"\"; writes with a lower fence are stale (stale_fence), from other pods not_holder, from non-pods write_not_pod.\n"))

	f.g.Expect(env.Client.Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain"}})).To(Succeed())
	out, err = f.p.run("explain-denial", "cm/plain")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(ContainSubstring("is not protected"))

	_, err = f.p.run("explain-denial", "secret/missing")
	f.g.Expect(err).To(MatchError("Secret " + f.ns + "/missing not found"))
	_, err = f.p.run("explain-denial", "something", "else")
	f.g.Expect(err).To(MatchError(`not a denial of the fencing webhook (admission webhook "protected.fencedlease.io"): "something else"`))
}

func podRef(ns, name string) *corev1.Pod {
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		panic(err)
	}
	return p
}

// events lists the reasons of the Events of a FencedLease.
func (f *fixture) events(name string) []string {
	var out []string
	list := &eventsv1.EventList{}
	f.g.Expect(env.Client.List(f.ctx, list)).To(Succeed())
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Namespace == f.ns && e.Regarding.Kind == "FencedLease" {
			out = append(out, e.Reason)
		}
	}
	return out
}
