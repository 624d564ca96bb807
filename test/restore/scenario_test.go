//go:build restore

package restore

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/record"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	lease      = "app"
	object     = "state"
	breakGlass = "restore-break-glass"
	// leaseSeconds is the FencedLease's lease duration: shorter than a
	// restart of the control plane, so that the grants in force when the
	// snapshot was taken have expired on the operator's clock afterwards.
	leaseSeconds = 4
)

// scenario is one control plane with the operator, a FencedLease of three
// pods, their workload writing one protected ConfigMap, and the record of
// what was published and accepted.
type scenario struct {
	t     *testing.T
	g     Gomega
	ctx   context.Context
	c     *cluster.Cluster
	env   *testenv.Env
	admin client.Client
	// cleanup acts as the garbage collector, which the admission policy
	// lets delete a FencedLease's Lease (the runbook's recovery step).
	cleanup  client.Client
	opConfig *rest.Config
	op       *testenv.Manager
	ns       string
	pods     map[string]*corev1.Pod

	mu    sync.Mutex
	phase string
	pubs  []publication
	// writes are the workload's protected writes.
	writes []write
	// podFences is each pod's publication now, to see changes.
	podFences map[string]int64
	// gaps counts the times the pod watch lost events: the record of the
	// publications is then incomplete.
	gaps int
}

// publication is a pod published as holder with a fence, as etcd applied it.
type publication struct {
	phase string
	pod   string
	fence int64
	at    time.Time
	// restored marks a publication that the restore itself brought back:
	// in the store when the restored members started, not written since.
	restored bool
}

// write is one protected write of the workload.
type write struct {
	phase    string
	pod      string
	fence    int64
	accepted bool
	reason   string
	at       time.Time
}

// newScenario starts the HA control plane, installs the CRDs, webhooks and
// admission policies, starts the operator, creates the FencedLease (takeover
// Immediate), its three ready pods and the protected ConfigMap, and starts
// the pods' workload and the record of publications.
func newScenario(t *testing.T) *scenario {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &scenario{t: t, g: g, ctx: ctx, pods: map[string]*corev1.Pod{}, podFences: map[string]int64{}, phase: "before the snapshot"}
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		bin = harness.ControlPlaneDir()
	}
	dir := t.TempDir()
	c, err := cluster.New(cluster.Config{Dir: dir, K8sBin: bin, HA: true, ControlPlaneOnly: true})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Up(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	s.c = c
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			for i, w := range s.writes {
				if i < 5 || i > len(s.writes)-5 {
					t.Logf("write %d: %+v", i, w)
				}
			}
			s.mu.Unlock()
			for _, n := range []string{"kube-apiserver-0", "kube-apiserver-1", "etcd-0"} {
				t.Logf("--- %s:\n%s", n, c.Tail(n, 15))
			}
		}
		_ = c.Down()
	})
	t.Cleanup(cancel) // before the control plane stops
	g.Expect(rest.LoadTLSFiles(c.RestConfig)).To(Succeed())
	s.env, err = testenv.Start(testenv.WithWebhooks(), testenv.WithExistingCluster(c.RestConfig))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.env.Stop() })
	s.admin = testenv.RetryTransient(s.env.Client)
	s.opConfig, err = testenv.OperatorConfig(ctx, s.env)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(testenv.InstallPolicies(ctx, s.admin, testenv.PolicyFiles()...)).To(Succeed())
	gc, err := c.UserConfig("restore-gc", "system:serviceaccount:kube-system:generic-garbage-collector", "system:masters")
	g.Expect(err).NotTo(HaveOccurred())
	s.cleanup = s.client(gc)
	s.startOperator()
	s.waitAdmission()

	s.ns, err = testenv.Namespace(ctx, s.admin, "restore")
	g.Expect(err).NotTo(HaveOccurred())
	// The workload may read its pod and write ConfigMaps: only the webhook
	// stands in its way.
	g.Expect(s.admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "workload"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		}})).To(Succeed())
	g.Expect(s.admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "workload"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "workload"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: s.ns, Name: "default"}}})).To(Succeed())
	g.Expect(s.follow()).To(Succeed())
	labels := map[string]string{"restore": lease}
	g.Expect(s.admin.Create(ctx, testenv.FencedLease(s.ns, lease, labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		fl.Spec.LeaseDurationSeconds = leaseSeconds
	}))).To(Succeed())
	for _, name := range []string{"app-0", "app-1", "app-2"} {
		pod, err := testenv.CreatePod(ctx, s.admin, testenv.Pod{Namespace: s.ns, Name: name, Labels: labels, Node: "restore-node", ServiceAccount: "default"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(testenv.SetReady(ctx, s.admin, pod, time.Now())).To(Succeed())
		s.pods[name] = pod
	}
	bgCfg, err := c.UserConfig("restore-break-glass", breakGlass, "system:masters")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.client(bgCfg).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: object,
		Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: lease}}})).To(Succeed())
	s.startWorkload()
	return s
}

func (s *scenario) client(cfg *rest.Config) client.Client {
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	s.g.Expect(err).NotTo(HaveOccurred())
	return testenv.RetryTransient(c)
}

// startOperator runs the operator, controller and webhooks, in the test's
// process, through the balancer; a fresh start remembers nothing. Its
// heartbeat vouches for the grants at the command's defaults, so a quiet
// grant's Lease is not written for minutes: the restored store must be
// noticed without a write of the grant's own.
func (s *scenario) startOperator() {
	var err error
	heartbeat := &fencedlease.Heartbeat{Namespace: metav1.NamespaceDefault, Name: fencedlease.DefaultHeartbeatName, Identity: "restore-operator",
		Interval: fencedlease.DefaultHeartbeatInterval, Refresh: fencedlease.DefaultHeartbeatRefresh}
	s.op, err = testenv.StartManager(s.ctx, s.opConfig, testenv.ManagerOptions{Webhooks: &s.env.WebhookInstallOptions,
		Options:        setup.Options{Heartbeat: heartbeat},
		WebhookOptions: setup.WebhookOptions{OperatorUsers: []string{testenv.OperatorUser}, BreakGlassUsers: []string{breakGlass}}})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.t.Cleanup(func() { _ = s.op.Stop() })
}

// stopOperator stops it, as a crash would.
func (s *scenario) stopOperator() {
	s.op.Crash()
	s.op.Wait()
}

// waitAdmission waits until each API server calls the fencing webhook.
func (s *scenario) waitAdmission() {
	for i := range s.c.APIServers() {
		sc := s.client(s.c.APIServerConfig(i))
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "probe-",
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "probe"}}}
		s.g.Eventually(func() string {
			err := sc.Create(s.ctx, probe.DeepCopy(), client.DryRunAll)
			if err == nil {
				return "admitted"
			}
			return err.Error()
		}).WithTimeout(time.Minute).Should(ContainSubstring("denied the request"), "API server %d calls the fencing webhook", i)
	}
}

// follow records the pods' publications from etcd itself.
func (s *scenario) follow() error {
	restored := s.phase == "after the restore"
	gap := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.gaps++
	}
	return s.c.FollowStorage(s.ctx, s.ns, &corev1.PodList{}, gap, func(t watch.EventType, o runtime.Object) {
		pod := o.(*corev1.Pod)
		fence := int64(0)
		if t != watch.Deleted && pod.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
			fence = record.FenceOf(pod.Annotations[fencingv1alpha1.AnnotationFence])
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		listed := restored && t == watch.Added
		if s.podFences[pod.Name] == fence && !listed {
			return
		}
		s.podFences[pod.Name] = fence
		if fence > 0 {
			s.pubs = append(s.pubs, publication{phase: s.phase, pod: pod.Name, fence: fence, at: time.Now(), restored: listed})
		}
	})
}

// startWorkload runs each pod's workload: every 100 ms it reads its pod
// (what its token files would show) and, published as holder, writes the
// protected ConfigMap with its fence, as the pod (a token bound to it).
func (s *scenario) startWorkload() {
	var wg sync.WaitGroup
	done := make(chan struct{})
	for name, pod := range s.pods {
		pc, err := testenv.PodClient(s.ctx, s.env.Config, pod)
		s.g.Expect(err).NotTo(HaveOccurred())
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := 0
			for {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				cur := &corev1.Pod{}
				gctx, gcancel := context.WithTimeout(s.ctx, 5*time.Second)
				err := pc.Get(gctx, client.ObjectKeyFromObject(pod), cur)
				gcancel()
				if err != nil {
					continue
				}
				fence := record.FenceOf(cur.Annotations[fencingv1alpha1.AnnotationFence])
				if cur.Annotations[fencingv1alpha1.AnnotationRole] != fencingv1alpha1.RoleHolder || fence == 0 {
					continue
				}
				seq++
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}},"data":{"by":%q}}`, fencingv1alpha1.AnnotationFence, fence, fmt.Sprintf("%s/%d", name, seq))
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: object}}
				wctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
				err = pc.Patch(wctx, cm, client.RawPatch(types.MergePatchType, []byte(patch)))
				cancel()
				if err != nil && !strings.Contains(err.Error(), "denied the request") {
					continue // not a decision of the webhook: unknown
				}
				s.mu.Lock()
				w := write{phase: s.phase, pod: name, fence: fence, accepted: err == nil, at: time.Now()}
				if err != nil {
					w.reason = err.Error()
				}
				s.writes = append(s.writes, w)
				s.mu.Unlock()
			}
		}()
	}
	s.t.Cleanup(func() { close(done); wg.Wait() })
}

func (s *scenario) setPhase(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = p
}

// holder waits for a publication of this phase above fence and returns the
// highest one.
func (s *scenario) holder(above int64, timeout time.Duration) publication {
	s.t.Helper()
	var last publication
	s.g.Eventually(func() int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		last = publication{}
		for _, p := range s.pubs {
			if p.phase == s.phase && p.fence > last.fence {
				last = p
			}
		}
		return last.fence
	}).WithTimeout(timeout).WithPolling(50*time.Millisecond).Should(BeNumerically(">", above), "a holder published with a fence above %d", above)
	return last
}

// acceptedAbove waits for a write of this phase accepted with a fence above
// fence.
func (s *scenario) acceptedAbove(fence int64, timeout time.Duration) write {
	s.t.Helper()
	var got write
	s.g.Eventually(func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, w := range s.writes {
			if w.phase == s.phase && w.accepted && w.fence > fence {
				got = w
				return true
			}
		}
		return false
	}).WithTimeout(timeout).WithPolling(50*time.Millisecond).Should(BeTrue(), "a write accepted with a fence above %d", fence)
	return got
}

// handoff makes the holder's containers not ready, waits for the next
// holder, and makes them ready again.
func (s *scenario) handoff(from publication) publication {
	s.t.Helper()
	pod := s.pods[from.pod]
	s.g.Expect(testenv.SetContainersNotReady(s.ctx, s.admin, pod)).To(Succeed())
	next := s.holder(from.fence, 30*time.Second)
	s.acceptedAbove(next.fence-1, 10*time.Second)
	s.g.Expect(testenv.SetReady(s.ctx, s.admin, pod, time.Now())).To(Succeed())
	return next
}

// maxFences are the highest fence published and the highest accepted so far.
func (s *scenario) maxFences() (published, accepted int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pubs {
		published = max(published, p.fence)
	}
	for _, w := range s.writes {
		if w.accepted {
			accepted = max(accepted, w.fence)
		}
	}
	return published, accepted
}

// state is what the API server stores now, in one line: the etcd revision,
// the FencedLease's status, the Lease's grant, the pods' publications and
// the protected object's fence.
func (s *scenario) state() string {
	rev, _ := s.c.EtcdRevision(s.ctx)
	fl, l, cm := &fencingv1alpha1.FencedLease{}, &coordinationv1.Lease{}, &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: s.ns, Name: lease}
	_ = s.admin.Get(s.ctx, key, fl)
	_ = s.admin.Get(s.ctx, key, l)
	_ = s.admin.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: object}, cm)
	holder := "none"
	if h := fl.Status.Holder; h != nil {
		holder = h.PodName
	}
	degraded := "-"
	if c := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		degraded = c.Reason
	}
	pods := &corev1.PodList{}
	_ = s.admin.List(s.ctx, pods, client.InNamespace(s.ns))
	var pub []string
	for _, p := range pods.Items {
		pub = append(pub, fmt.Sprintf("%s=%s/%s", p.Name, p.Annotations[fencingv1alpha1.AnnotationRole], p.Annotations[fencingv1alpha1.AnnotationFence]))
	}
	sort.Strings(pub)
	return fmt.Sprintf("etcd revision %d; status: fence %d, holder %s, degraded %s; Lease: %s fence %s (resourceVersion %s); pods: %s; ConfigMap %s: fence %s",
		rev, fl.Status.Fence, holder, degraded, l.Annotations[fencingv1alpha1.LeaseAnnotationState], l.Annotations[fencingv1alpha1.AnnotationFence],
		l.ResourceVersion, strings.Join(pub, " "), object, cm.Annotations[fencingv1alpha1.AnnotationFence])
}

// restoredGrantHeld says whether the Lease, as the API server has it, shows
// a grant held with a fence not above fence floor: one the restore brought
// back.
func (s *scenario) restoredGrantHeld(floor int64) bool {
	l := &coordinationv1.Lease{}
	if err := s.admin.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: lease}, l); err != nil {
		return true // unknown: not shown ended
	}
	r := record.ParseLease(l.Annotations)
	return r.Held() && r.Fence <= floor
}

// degraded is the FencedLease's Degraded reason now ("" when not
// degraded).
func (s *scenario) degraded() string {
	fl := &fencingv1alpha1.FencedLease{}
	if err := s.admin.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: lease}, fl); err != nil {
		return "unknown: " + err.Error()
	}
	if c := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason
	}
	return ""
}

// regressionEvents are the FenceRegression events of the FencedLease.
func (s *scenario) regressionEvents() []string {
	list := &eventsv1.EventList{}
	if err := s.admin.List(s.ctx, list, client.InNamespace(s.ns)); err != nil {
		return []string{"list events: " + err.Error()}
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == fencingv1alpha1.EventFenceRegression && e.Regarding.Name == lease {
			out = append(out, e.Type+": "+e.Note)
		}
	}
	return out
}

// after returns the publications and writes of a phase.
func (s *scenario) after(phases ...string) ([]publication, []write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := func(p string) bool {
		for _, q := range phases {
			if p == q {
				return true
			}
		}
		return false
	}
	var pubs []publication
	for _, p := range s.pubs {
		if in(p.phase) {
			pubs = append(pubs, p)
		}
	}
	var writes []write
	for _, w := range s.writes {
		if in(w.phase) {
			writes = append(writes, w)
		}
	}
	return pubs, writes
}

// logFences prints the publications and a summary of the writes of the
// phases.
func (s *scenario) logFences(phases ...string) {
	pubs, writes := s.after(phases...)
	for _, p := range pubs {
		how := "published"
		if p.restored {
			how = "restored"
		}
		s.t.Logf("  %s: %s %s with fence %d", p.phase, how, p.pod, p.fence)
	}
	type key struct {
		phase, pod string
		fence      int64
		accepted   bool
	}
	counts := map[key]int{}
	var keys []key
	for _, w := range writes {
		k := key{w.phase, w.pod, w.fence, w.accepted}
		if counts[k] == 0 {
			keys = append(keys, k)
		}
		counts[k]++
	}
	for _, k := range keys {
		what := "accepted"
		if !k.accepted {
			what = "refused"
		}
		s.t.Logf("  %s: %d writes of %s with fence %d %s", k.phase, counts[k], k.pod, k.fence, what)
	}
}
