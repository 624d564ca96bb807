//go:build apf

package flowcontrol_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	// leaseSeconds and renewSeconds: short leases, so that a renewal held
	// up for two seconds lets a grant expire.
	leaseSeconds = 6
	renewSeconds = 2
	// holderWriters holder pods write their protected ConfigMap every
	// writeInterval.
	holderWriters = 4
	writeInterval = 250 * time.Millisecond
	// handoffLease is handed over in every phase, on purpose: its grant
	// changes, and the operator writes pods and pod status.
	handoffLease = "handoff"
	// warmup lets the load fill the queues (and the API server adjust what
	// its levels borrow, every 10 s) before a phase is measured.
	warmup = 10 * time.Second
)

// TestOperatorUnderCompetingLoad: the operator renews APF_LEASES short
// FencedLeases, hands one over and answers its webhooks while a busy
// namespace saturates workload-low: first without its API Priority and
// Fairness objects, then with them as the chart renders them (package doc).
func TestOperatorUnderCompetingLoad(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := result{Leases: envInt("APF_LEASES", 100), LeaseSeconds: leaseSeconds, RenewSeconds: renewSeconds,
		LoadAccounts: envInt("APF_LOAD_ACCOUNTS", 48), LoadWorkers: envInt("APF_LOAD_WORKERS", 4), ServerLimits: serverLimits}
	r := &run{t: t, ctx: ctx, admin: env.Client, phaseLen: max(envDuration("APF_PHASE", 30*time.Second), 6*time.Second)}
	res.PhaseSeconds = r.phaseLen.Seconds()

	// What the second phase installs, rendered before anything runs.
	objs, source, err := renderFlowControl(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(2), "a FlowSchema and its PriorityLevelConfiguration")
	res.Installed = source + ": " + flowControlNames(objs)

	r.ns, err = testenv.Namespace(ctx, r.admin, "apf")
	g.Expect(err).NotTo(HaveOccurred())
	checker, err := testenv.WatchHolders(ctx, env.Config, r.ns)
	g.Expect(err).NotTo(HaveOccurred())
	role, binding := writerRole(r.ns)
	g.Expect(r.admin.Create(ctx, role)).To(Succeed())
	g.Expect(r.admin.Create(ctx, binding)).To(Succeed())
	holders := r.candidates(res.Leases)

	// The operator, as its service account: the controller, and the
	// webhooks in a manager of their own, so that their requests are told
	// apart.
	r.ctrlRec, r.hookRec = &recorder{}, &recorder{}
	var opts setup.Options
	res.Heartbeat = "off"
	if envDuration("APF_HEARTBEAT", fencedlease.DefaultHeartbeatInterval) > 0 {
		// As cmd/manager runs it by default.
		opts.Heartbeat = &fencedlease.Heartbeat{Namespace: testenv.OperatorNamespace, Name: fencedlease.DefaultHeartbeatName,
			Interval: fencedlease.DefaultHeartbeatInterval, Refresh: fencedlease.DefaultHeartbeatRefresh, Identity: "apf-test"}
		res.Heartbeat = fmt.Sprintf("%s, refresh %s", opts.Heartbeat.Interval, opts.Heartbeat.Refresh)
	}
	ctrlMgr, err := testenv.StartManager(ctx, r.ctrlRec.wrap(operatorConfig), testenv.ManagerOptions{Options: opts})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ctrlMgr.Stop() }()
	hookMgr, err := testenv.StartManager(ctx, r.hookRec.wrap(operatorConfig), testenv.ManagerOptions{
		NoController:   true,
		Webhooks:       &env.WebhookInstallOptions,
		WebhookOptions: setup.WebhookOptions{OperatorUsers: []string{testenv.OperatorUser}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = hookMgr.Stop() }()
	g.Eventually(r.held).WithContext(ctx).WithTimeout(5*time.Minute).WithPolling(time.Second).Should(Equal(res.Leases+1), "every FencedLease held and published")

	r.leases, err = watchLeases(ctx, env.Config, r.ns)
	g.Expect(err).NotTo(HaveOccurred())
	if opts.Heartbeat != nil {
		r.heartbeat, err = watchLeases(ctx, env.Config, opts.Heartbeat.Namespace)
		g.Expect(err).NotTo(HaveOccurred())
	}
	for _, pod := range holders[:holderWriters] {
		as, err := testenv.PodClient(ctx, env.Config, pod)
		g.Expect(err).NotTo(HaveOccurred())
		w := &holderWriter{pod: pod, lease: pod.Labels["app"], as: as}
		g.Expect(w.create(ctx, r.admin)).To(Succeed())
		r.writers = append(r.writers, w)
	}
	r.busy, err = newBusyNamespace(ctx, env, res.LoadAccounts, res.LoadWorkers)
	g.Expect(err).NotTo(HaveOccurred())
	defer r.busy.stop()
	if delay := envDuration("APF_LOAD_ADMISSION_DELAY", time.Second); delay > 0 {
		res.LoadAdmissionDelayMs = ms(delay)
		policy, err := startSlowPolicy(ctx, r.admin, r.busy.ns, delay)
		g.Expect(err).NotTo(HaveOccurred())
		defer policy.close()
	}

	serviceAccounts, err := classificationOf(ctx, r.admin, "service-accounts")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(serviceAccounts.priorityLevel).To(Equal("workload-low"))
	without := r.phase("without", serviceAccounts)
	ours, err := install(ctx, r.admin, objs, operatorConfig)
	g.Expect(err).NotTo(HaveOccurred())
	with := r.phase("with", ours)

	violations := checker.Violations()
	res.machine()
	res.Phases = []phaseResult{without.res, with.res}
	res.CheckerFailed = len(violations) > 0
	res.log(t)
	testenv.WriteResult(t, "APF_OUT", res)

	// At most one holder per FencedLease, fences increasing, in both phases.
	g.Expect(violations).To(BeEmpty(), "holder invariants broken in namespace %s", r.ns)

	for _, p := range []phase{without, with} {
		// The load competed: requests of workload-low found no free seat
		// and queued.
		g.Expect(p.res.Levels["workload-low"].Queued).To(BeNumerically(">", 0), "%s: the load never filled workload-low", p.res.Name)
		// Every request of the operator was classified as the phase says.
		for who, reqs := range map[string][]request{"controller": p.controller, "webhooks": p.webhooks} {
			matched, other := byClassification(reqs, p.want.flowSchemaUID, p.want.priorityLevelUID)
			g.Expect(matched).NotTo(BeEmpty(), "%s: no request of the operator's %s", p.res.Name, who)
			g.Expect(other).To(BeEmpty(), "%s: requests of the operator's %s not classified by FlowSchema %s (%s)",
				p.res.Name, who, p.want.flowSchema, p.want.flowSchemaUID)
		}
	}
	// With the chart's objects, all that the renewals and the webhooks
	// depend on went through the operator's level,
	controller, _ := byClassification(with.controller, ours.flowSchemaUID, ours.priorityLevelUID)
	for _, kind := range []string{"update leases", "patch fencedleases/status", "patch pods", "patch pods/status", "create events"} {
		g.Expect(controller).To(HaveKey(kind), "with: the controller's writes")
	}
	webhooks, _ := byClassification(with.webhooks, ours.flowSchemaUID, ours.priorityLevelUID)
	g.Expect(webhooks).To(HaveKey("get leases"), "with: the webhooks' live reads of the grant")
	// and no held grant changed or expired under its healthy holder, and the
	// holders' writes were all admitted.
	g.Expect(with.res.HandoffSeconds).To(BeNumerically(">", 0), "with: the handoff happened within the phase")
	g.Expect(with.fencesAfter).To(Equal(with.fencesBefore), "with: the fences of the FencedLeases that were not handed over")
	g.Expect(with.res.Regrants).To(BeEmpty(), "with: Leases granted again")
	g.Expect(with.res.ExpiredWhileRunning).To(BeZero(), "with: grants that expired while their holder ran")
	g.Expect(with.leaseWatchBroken).To(BeFalse(), "with: the watch of the Leases missed changes")
	h := with.res.HolderWrites
	g.Expect(h.Admitted).To(BeNumerically(">", 0))
	g.Expect(h.Denied+h.WebhookFailed).To(BeZero(), "with: holder writes rejected: %v", h.Errors)
}

// run is what the phases share.
type run struct {
	t        *testing.T
	ctx      context.Context
	admin    client.Client
	ns       string
	phaseLen time.Duration
	// ctrlRec and hookRec record the requests of the operator's controller
	// and of its webhooks.
	ctrlRec, hookRec *recorder
	leases           *leaseWatch
	// heartbeat watches the operator's namespace, where the heartbeat Lease
	// is; nil when the operator runs without one.
	heartbeat *leaseWatch
	busy      *busyNamespace
	writers   []*holderWriter
}

// candidates creates the FencedLeases fl-<i> of one ready pod each, and the
// handoff FencedLease of two pods with its readiness gate, and returns the
// pods of fl-0, fl-1 ...
func (r *run) candidates(n int) []*corev1.Pod {
	g := NewWithT(r.t)
	pods := make([]*corev1.Pod, n)
	parallel(n, 16, func(i int) {
		name := fmt.Sprintf("fl-%d", i)
		pod, err := testenv.CreatePod(r.ctx, r.admin, testenv.Pod{Namespace: r.ns, Name: name + "-0", Labels: map[string]string{"app": name}, ServiceAccount: "default"})
		if err == nil {
			err = testenv.SetReady(r.ctx, r.admin, pod, time.Now().Add(-time.Hour).Truncate(time.Second))
		}
		if err == nil {
			err = r.admin.Create(r.ctx, testenv.FencedLease(r.ns, name, map[string]string{"app": name}, timing))
		}
		if err != nil {
			r.t.Error(err)
		}
		pods[i] = pod
	})
	g.Expect(r.t.Failed()).To(BeFalse())
	gate := func(p *corev1.Pod) {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: fencingv1alpha1.ConditionHolder}}
	}
	for i, name := range []string{"a", "b"} {
		pod, err := testenv.CreatePod(r.ctx, r.admin, testenv.Pod{Namespace: r.ns, Name: handoffLease + "-" + name,
			Labels: map[string]string{"app": handoffLease}, ServiceAccount: "default", Mutate: gate})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(testenv.SetReady(r.ctx, r.admin, pod, time.Now().Add(-time.Duration(2-i)*time.Hour).Truncate(time.Second))).To(Succeed())
	}
	g.Expect(r.admin.Create(r.ctx, testenv.FencedLease(r.ns, handoffLease, map[string]string{"app": handoffLease}, func(fl *fencingv1alpha1.FencedLease) {
		timing(fl)
		fl.Spec.ReadinessGate = true
	}))).To(Succeed())
	return pods
}

func timing(fl *fencingv1alpha1.FencedLease) {
	fl.Spec.LeaseDurationSeconds = leaseSeconds
	fl.Spec.RenewIntervalSeconds = ptr.To[int32](renewSeconds)
}

// parallel runs f(0) ... f(n-1) on workers goroutines.
func parallel(n, workers int, f func(int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// held counts the FencedLeases whose holder carries the status's fence.
func (r *run) held() (int, error) {
	var fls fencingv1alpha1.FencedLeaseList
	if err := r.admin.List(r.ctx, &fls, client.InNamespace(r.ns)); err != nil {
		return 0, err
	}
	var pods corev1.PodList
	if err := r.admin.List(r.ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return 0, err
	}
	fence := map[string]string{}
	for _, p := range pods.Items {
		fence[p.Name] = p.Annotations[fencingv1alpha1.AnnotationFence]
	}
	n := 0
	for _, fl := range fls.Items {
		if h := fl.Status.Holder; h != nil && fl.Status.Fence > 0 && fence[h.PodName] == fmt.Sprint(fl.Status.Fence) {
			n++
		}
	}
	return n, nil
}

// fences are the status fences of the FencedLeases but the handoff one.
func (r *run) fences() map[string]int64 {
	var fls fencingv1alpha1.FencedLeaseList
	NewWithT(r.t).Expect(r.admin.List(r.ctx, &fls, client.InNamespace(r.ns))).To(Succeed())
	out := map[string]int64{}
	for _, fl := range fls.Items {
		if fl.Name != handoffLease {
			out[fl.Name] = fl.Status.Fence
		}
	}
	return out
}

// handoff asks for a handoff of the handoff FencedLease and returns the
// seconds until another pod is published as holder with a higher fence, or
// -1 if ctx ends first.
func (r *run) handoff(ctx context.Context) float64 {
	key := client.ObjectKey{Namespace: r.ns, Name: handoffLease}
	fl := &fencingv1alpha1.FencedLease{}
	if err := r.admin.Get(ctx, key, fl); err != nil || fl.Status.Holder == nil {
		return -1
	}
	from, fence := fl.Status.Holder.PodName, fl.Status.Fence
	base := fl.DeepCopy()
	if fl.Annotations == nil {
		fl.Annotations = map[string]string{}
	}
	start := time.Now()
	fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt] = start.UTC().Format(time.RFC3339)
	if err := r.admin.Patch(ctx, fl, client.MergeFrom(base)); err != nil {
		return -1
	}
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if err := r.admin.Get(ctx, key, fl); err != nil || fl.Status.Holder == nil || fl.Status.Holder.PodName == from || fl.Status.Fence <= fence {
			continue
		}
		pod := &corev1.Pod{}
		if err := r.admin.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: fl.Status.Holder.PodName}, pod); err == nil &&
			pod.Annotations[fencingv1alpha1.AnnotationFence] == fmt.Sprint(fl.Status.Fence) {
			return time.Since(start).Seconds()
		}
	}
	return -1
}
