//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env *testenv.Env
	// plane is the control plane env started, measured with the operator.
	plane controlPlane
)

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.ControlPlane))
	}
	klog.SetLogger(logr.Discard()) // client-go's leader election logs every attempt
	testenv.Main(m, &env)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestScale runs the operator binary, as a process of its own, against a real
// API server with SCALE_LEASES FencedLeases of SCALE_PODS ready pods each
// (pods of a Deployment's size; 15 s leases, renewed every 5 s), and
// measures: the time from the first FencedLease until every one is held and
// published (a cold start), then SCALE_STEADY of steady state, in which no
// grant may change (zero re-grants, the same fence on every lease), with
// the Lease writes per second, the operator's CPU and memory and its work
// queue latency (SCALE_NAMESPACES spreads the FencedLeases and their pods
// over that many namespaces, one by default); then two restarts of the operator (caching slim pods, then
// whole pods with --cache-whole-pods): the time until the new process has
// renewed every Lease, and its memory over SCALE_WINDOW; then
// SCALE_CLIENTGO_GROUPS client-go elections of SCALE_PODS candidates with
// its default timing, for their Lease writes per second. The figures go to
// the log and, as JSON, to $SCALE_OUT.
func TestScale(t *testing.T) {
	leases, podsPer := envInt("SCALE_LEASES", 1000), envInt("SCALE_PODS", 2)
	steady, window := envDuration("SCALE_STEADY", 10*time.Minute), envDuration("SCALE_WINDOW", time.Minute)
	cgGroups := envInt("SCALE_CLIENTGO_GROUPS", min(leases, 1000))
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := result{Leases: leases, PodsPerLease: podsPer}
	// Held and published are counted from a cache of the FencedLeases and
	// of the pods' metadata, which a poll reads in memory: a LIST of 10,000
	// FencedLeases and 20,000 pods every poll would be a load of its own on
	// the API server the operator shares.
	poll := 500 * time.Millisecond
	plane = findControlPlane()
	if plane.apiserver == 0 || plane.etcd == 0 {
		t.Logf("control plane processes not found (%+v): their CPU is not measured", plane)
	}

	cfg := *env.Config
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(&cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	nss := make([]string, max(envInt("SCALE_NAMESPACES", 1), 1))
	for i := range nss {
		nss[i], err = testenv.Namespace(ctx, c, "scale")
		g.Expect(err).NotTo(HaveOccurred())
	}
	nsOf := func(i int) string { return nss[i%len(nss)] }
	res.Namespaces = len(nss)
	counts, err := countingCache(ctx, &cfg, nss)
	g.Expect(err).NotTo(HaveOccurred())
	for i := 0; i < 10; i++ {
		g.Expect(testenv.EnsureNode(ctx, c, fmt.Sprintf("scale-node-%d", i))).To(Succeed())
	}

	// The pods first (they take longest to create), then the operator, then
	// the FencedLeases: the clock starts at the first FencedLease.
	start := time.Now()
	parallel(leases, 16, func(i int) {
		for p := 0; p < podsPer; p++ {
			err := createPod(ctx, c, nsOf(i), fmt.Sprintf("fl-%d-%d", i, p), fmt.Sprintf("fl-%d", i), fmt.Sprintf("scale-node-%d", (i+p)%10),
				start.Add(-time.Duration(p+1)*time.Minute))
			if err != nil {
				t.Error(err)
			}
		}
	})
	res.PodsCreated = time.Since(start).Seconds()
	t.Logf("%d pods created and ready in %s", leases*podsPer, time.Since(start).Round(time.Second))
	g.Expect(t.Failed()).To(BeFalse())

	// The ceiling: the API server's rate for the writes of a first grant,
	// in this run, before the operator starts.
	cns, err := testenv.Namespace(ctx, c, "ceiling")
	g.Expect(err).NotTo(HaveOccurred())
	// Profiled as the cold start is (SCALE_PPROF): the API server's time
	// per write in each tells where the cold start's share goes.
	go profileAPIServer(ctx, t, &cfg, fmt.Sprintf("apiserver-%d-ceiling", leases), 10*time.Second)
	res.Ceiling, err = measureCeiling(ctx, c, cns, min(leases, envInt("SCALE_CEILING_GRANTS", 1000)), 32, func(i int) (string, string, string) {
		return nsOf(i), fmt.Sprintf("fl-%d-0", i), fmt.Sprintf("fl-%d-%d", i, min(1, podsPer-1))
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Ceiling.Failed).To(BeZero(), "the API server refused writes of the ceiling's mix, the first: %s", res.Ceiling.FirstError)
	t.Logf("ceiling: %d writes of %d first grants' mix on %d workers in %.1f s: %.0f writes a second",
		res.Ceiling.Writes, res.Ceiling.Grants, res.Ceiling.Workers, res.Ceiling.Seconds, res.Ceiling.WritesPerSecond)

	bin, kubeconfig := buildOperator(t)
	op := startOperator(t, ctx, bin, kubeconfig)
	w := watchLeases(t, ctx, c, nss...)
	g.Eventually(op.scrape).WithTimeout(time.Minute).Should(HaveKey("go_memstats_heap_inuse_bytes"), "the operator serves metrics")
	m0, _ := op.scrape()

	writes0, err := readAPIRequests(ctx, &cfg, writeVerbs)
	g.Expect(err).NotTo(HaveOccurred())
	lists0, err := readAPIRequests(ctx, &cfg, listVerbs)
	g.Expect(err).NotTo(HaveOccurred())
	created := time.Now()
	stopSeries := series(ctx, &cfg, op, created, envDuration("SCALE_SERIES", 10*time.Second))
	parallel(leases, 16, func(i int) {
		fl := testenv.FencedLease(nsOf(i), fmt.Sprintf("fl-%d", i), map[string]string{"app": fmt.Sprintf("fl-%d", i)}, nil)
		if err := c.Create(ctx, fl); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%d FencedLeases created in %s", leases, time.Since(created).Round(time.Millisecond))
	go op.profile(ctx, t, "profile", fmt.Sprintf("%d-cold", leases))
	go profileAPIServer(ctx, t, &cfg, fmt.Sprintf("apiserver-%d-cold", leases), 20*time.Second)
	// Cold start: how many are held and published, every poll, until all
	// are or SCALE_COLD_TIMEOUT passes; a run that times out records how
	// far it got.
	coldTimeout := envDuration("SCALE_COLD_TIMEOUT", 20*time.Minute)
	lastLog := time.Now()
	for {
		held := publishedHolders(ctx, t, counts)
		at := time.Since(created)
		res.ColdProgress = append(res.ColdProgress, progress{Seconds: at.Seconds(), Held: held})
		if held == leases {
			res.ColdStart = at.Seconds()
			break
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("cold start: %d of %d held and published after %s", held, leases, at.Round(time.Second))
			lastLog = time.Now()
		}
		if at > coldTimeout {
			// Record it, skip the steady state, and still measure what the
			// restarts cost in memory, with each cache.
			res.ColdQueue = queueLatencyBetween(m0, scrapeOr(op))
			t.Errorf("cold start: only %d of %d FencedLeases held and published after %s", held, leases, at.Round(time.Second))
			break
		}
		time.Sleep(poll)
	}
	res.ColdSeries = stopSeries()
	allHeld := time.Duration(res.ColdStart * float64(time.Second))
	if writes1, err := readAPIRequests(ctx, &cfg, writeVerbs); err == nil {
		// The heartbeat's renewals are in it too: one a second.
		res.ColdWritesPerGrant = perGrant(writes0, writes1, leases, leases)
		t.Logf("cold start: API writes per first grant (the API server's count, the test's FencedLease creates left out): %s", describe(res.ColdWritesPerGrant))
	} else {
		t.Logf("cold start: API writes not counted: %v", err)
	}
	if lists1, err := readAPIRequests(ctx, &cfg, listVerbs); err == nil {
		// A list costs the API server a pass over every object of its
		// namespace that it filters.
		res.ColdListsPerGrant = perGrant(lists0, lists1, 0, leases)
		t.Logf("cold start: API lists per first grant: %s", describe(res.ColdListsPerGrant))
	} else {
		t.Logf("cold start: API lists not counted: %v", err)
	}
	res.ColdQueue = queueLatencyBetween(m0, scrapeOr(op))
	_, res.ColdRegrants = w.counts()
	res.ColdHeld = res.ColdProgress[len(res.ColdProgress)-1].Held
	res.WaitingForCapacity = waitingForCapacity(ctx, t, counts)
	t.Logf("cold start: %d re-grants; %d FencedLeases wait for capacity", res.ColdRegrants, res.WaitingForCapacity)
	if res.ColdStart > 0 {
		t.Logf("cold start: all %d FencedLeases held and published %s after the first was created; queue latency %+v", leases, allHeld.Round(100*time.Millisecond), res.ColdQueue)
		res.ColdShare = share(leases, res.ColdStart, res.ColdWritesPerGrant, res.Ceiling)
		t.Logf("cold start: %.2f of the ceiling (%.1f first grants a second × %.2f writes each, over %.0f writes a second)",
			res.ColdShare, float64(leases)/res.ColdStart, sum(res.ColdWritesPerGrant), res.Ceiling.WritesPerSecond)
	}
	res.ColdPace = paceLines(op.out.String())
	for _, line := range res.ColdPace {
		t.Logf("cold start: the operator's pace: %s", line)
	}
	// The steady state, also when not all are held: the grants the operator
	// holds must stay unchanged however far past its capacity it is.
	steadyState(t, g, &res, op, w, steady, leases)
	op.profile(ctx, t, "heap", fmt.Sprintf("%d-heap", leases))

	// Restarts: slim pods, then whole pods.
	res.Restarts = restarts(t, ctx, counts, bin, kubeconfig, op, w, leases, window, poll, res.ColdStart > 0)

	// client-go elections with the same number of candidates.
	if cgGroups > 0 {
		cgns, err := testenv.Namespace(ctx, c, "clientgo")
		g.Expect(err).NotTo(HaveOccurred())
		cw := watchLeases(t, ctx, c, cgns)
		cgctx, cgcancel := context.WithCancel(ctx)
		wg, err := runClientGoGroups(cgctx, env.Config, cgns, cgGroups, podsPer)
		g.Expect(err).NotTo(HaveOccurred())
		time.Sleep(5 * time.Second)
		cw.reset()
		at := time.Now()
		time.Sleep(window)
		writes, _ := cw.counts()
		elapsed := time.Since(at)
		cgcancel()
		wg.Wait()
		res.ClientGo = clientGo{Groups: cgGroups, Candidates: podsPer, Seconds: elapsed.Seconds(), Writes: writes,
			WritesPerSecond: float64(writes) / elapsed.Seconds(), PerGroup: float64(writes) / elapsed.Seconds() / float64(cgGroups)}
		t.Logf("client-go: %+v", res.ClientGo)
	}
	writeResult(t, res)
}

// steadyState measures d of steady state, in which no grant may change.
func steadyState(t *testing.T, g Gomega, res *result, op *operator, w *leaseWatch, steady time.Duration, leases int) {
	fences := w.fences()
	w.reset()
	go profileAPIServer(context.Background(), t, env.Config, fmt.Sprintf("apiserver-%d-steady", leases), min(30*time.Second, steady/2))
	res.Steady = measure(t, op, steady, leases, w)
	now := w.fences()
	for name, f := range fences {
		if f != "" && now[name] != f {
			res.Steady.FencesChanged++
		}
	}
	t.Logf("steady state: %+v", res.Steady)
	g.Expect(res.Steady.Regrants).To(BeZero(), "no grant changes in steady state")
	g.Expect(res.Steady.FencesChanged).To(BeZero(), "every lease keeps its fence")
	g.Expect(res.Steady.Writes+int(res.Steady.Heartbeats)).To(BeNumerically(">", 0), "the operator renews: its heartbeat, or each Lease")
	if res.Steady.Heartbeats > 0 {
		// A quiet grant's Lease is written once every refresh interval (5
		// minutes): at most 0.01 writes a second per lease.
		g.Expect(res.Steady.PerLease).To(BeNumerically("<=", 0.01), "quiet leases cost (almost) no write with the heartbeat")
	}
}

// heartbeats is how often the operator renewed its heartbeat, by its
// metrics.
func heartbeats(m map[string]float64) float64 { return m["fencedlease_heartbeats_total"] }

// restarts kills the operator and starts it again, first caching slim pods,
// then whole pods (--cache-whole-pods), and measures each: the time until
// the new process has renewed every Lease and all are held and published
// (required when held is true; otherwise waited for at most a window), then
// a window of steady state. No grant may change meanwhile.
func restarts(t *testing.T, ctx context.Context, c client.Reader, bin, kubeconfig string, op *operator, w *leaseWatch,
	leases int, window, poll time.Duration, held bool) []restart {
	g := NewWithT(t)
	var out []restart
	for _, podCache := range []string{"slim pods", "whole pods"} {
		op.stop()
		var extra []string
		if podCache == "whole pods" {
			extra = append(extra, "--cache-whole-pods")
		}
		w.reset()
		op = startOperator(t, ctx, bin, kubeconfig, extra...)
		r := restart{Cache: podCache}
		if held {
			// Every Lease renewed by the new process: each on its own, or all
			// at once by its heartbeat (the first renewal of it counts).
			g.Eventually(func() bool {
				return w.renewedSince(op.started) == leases || heartbeats(scrapeOr(op)) > 0
			}).WithTimeout(10*time.Minute).WithPolling(100*time.Millisecond).Should(BeTrue(), "the new operator renews every Lease")
			r.AllRenewed = time.Since(op.started).Seconds()
			g.Eventually(func() int { return publishedHolders(ctx, t, c) }).WithTimeout(10 * time.Minute).WithPolling(poll).Should(Equal(leases))
			r.AllHeld = time.Since(op.started).Seconds()
		} else {
			time.Sleep(window)
		}
		_, r.Regrants = w.counts()
		w.reset()
		r.Window = measure(t, op, window, leases, w)
		t.Logf("restart caching %s: every Lease renewed after %.1f s, all held and published after %.1f s, %d re-grants; then %+v",
			podCache, r.AllRenewed, r.AllHeld, r.Regrants, r.Window)
		if n := r.Regrants + r.Window.Regrants; n > 0 {
			t.Errorf("restart caching %s: %d grants changed under healthy holders", podCache, n)
		}
		out = append(out, r)
	}
	op.stop()
	return out
}

// measure samples the operator for d: Lease writes and re-grants seen by
// w, CPU, the largest RSS, the heap in use at the end, the queue latency.
func measure(t *testing.T, op *operator, d time.Duration, leases int, w *leaseWatch) window {
	m0, err := op.scrape()
	if err != nil {
		t.Fatal(err)
	}
	cpu0, cp0, at0 := op.cpu(), plane.sample(), time.Now()
	var maxRSS, cpRSS int64
	for time.Since(at0) < d {
		time.Sleep(min(5*time.Second, d/4))
		maxRSS = max(maxRSS, op.rss())
		cpRSS = max(cpRSS, rssOf(plane.apiserver))
		if !op.running() {
			t.Fatalf("the operator exited:\n%s", tail(op.output(), 4096))
		}
	}
	elapsed := time.Since(at0)
	m1, err := op.scrape()
	if err != nil {
		t.Fatal(err)
	}
	writes, regrants := w.counts()
	return window{Seconds: elapsed.Seconds(), Writes: writes, WritesPerSecond: float64(writes) / elapsed.Seconds(),
		PerLease: float64(writes) / elapsed.Seconds() / float64(leases), Regrants: regrants,
		CPUPercent: 100 * (op.cpu() - cpu0).Seconds() / elapsed.Seconds(), MaxRSSMiB: float64(maxRSS) / (1 << 20),
		HeapInuseMiB: m1["go_memstats_heap_inuse_bytes"] / (1 << 20), Queue: queueLatencyBetween(m0, m1), Heartbeats: heartbeats(m1) - heartbeats(m0),
		ControlPlane: usageBetween(cp0, plane.sample(), elapsed, cpRSS)}
}

// sum adds the values of m.
func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// parallel runs f(0..n-1) on workers goroutines.
func parallel(n, workers int, f func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// waitingForCapacity counts the FencedLeases of the counting cache whose
// first grant waits for the operator's capacity (Held=False,
// WaitingForCapacity).
func waitingForCapacity(ctx context.Context, t *testing.T, c client.Reader) int {
	var fls fencingv1alpha1.FencedLeaseList
	if err := c.List(ctx, &fls); err != nil {
		t.Log(err)
		return -1
	}
	n := 0
	for _, fl := range fls.Items {
		if cond := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionHeld); cond != nil && cond.Reason == fencingv1alpha1.ReasonWaitingForCapacity {
			n++
		}
	}
	return n
}

// publishedHolders counts the FencedLeases of the counting cache whose
// holder pod is published with the fence the status records (pod names are
// unique across the test's namespaces).
func publishedHolders(ctx context.Context, t *testing.T, c client.Reader) int {
	var fls fencingv1alpha1.FencedLeaseList
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.List(ctx, &fls); err != nil {
		t.Log(err)
		return -1
	}
	if err := c.List(ctx, pods); err != nil {
		t.Log(err)
		return -1
	}
	published := map[string]string{}
	for _, p := range pods.Items {
		if p.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
			published[p.Name] = p.Annotations[fencingv1alpha1.AnnotationFence]
		}
	}
	n := 0
	for _, fl := range fls.Items {
		if h := fl.Status.Holder; h != nil && published[h.PodName] == strconv.FormatInt(fl.Status.Fence, 10) {
			n++
		}
	}
	return n
}

// countingCache is a cache of the FencedLeases and of the pods' metadata in
// the namespaces nss, synced, for counting without a LIST per poll.
func countingCache(ctx context.Context, cfg *rest.Config, nss []string) (cache.Cache, error) {
	namespaces := map[string]cache.Config{}
	for _, ns := range nss {
		namespaces[ns] = cache.Config{}
	}
	cc, err := cache.New(cfg, cache.Options{Scheme: setup.Scheme(), DefaultNamespaces: namespaces,
		DefaultUnsafeDisableDeepCopy: ptr.To(true)})
	if err != nil {
		return nil, err
	}
	go func() { _ = cc.Start(ctx) }()
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	for _, obj := range []client.Object{&fencingv1alpha1.FencedLease{}, pod} {
		if _, err := cc.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	return cc, nil
}

// leaseWatch counts the Lease writes and re-grants of the namespaces it
// watches (Lease names are unique across them).
type leaseWatch struct {
	mu          sync.Mutex
	writes      int
	regrants    int
	transitions map[string]int32
	fence       map[string]string
	renewed     map[string]time.Time
}

func watchLeases(t *testing.T, ctx context.Context, c client.WithWatch, nss ...string) *leaseWatch {
	lw := &leaseWatch{transitions: map[string]int32{}, fence: map[string]string{}, renewed: map[string]time.Time{}}
	for _, ns := range nss {
		w, err := c.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		go lw.follow(t, ctx, c, ns, w)
	}
	return lw
}

// follow records the Lease events of w, watching ns again when the API
// server ends the watch.
func (lw *leaseWatch) follow(t *testing.T, ctx context.Context, c client.WithWatch, ns string, w watch.Interface) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // too old: from now on
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			rv = l.ResourceVersion
			if ev.Type != watch.Deleted {
				lw.see(l)
			}
		}
		// The API server ended the watch: watch again from the last
		// version seen.
		for {
			if ctx.Err() != nil {
				return
			}
			next, err := c.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err == nil {
				w = next
				break
			}
			t.Logf("watch the Leases of %s again: %v", ns, err)
			time.Sleep(time.Second)
		}
	}
}

func (lw *leaseWatch) see(l *coordinationv1.Lease) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.writes++
	tr := ptr.Deref(l.Spec.LeaseTransitions, 0)
	// A first grant (transitions 0 to 1) is not a re-grant.
	if old, seen := lw.transitions[l.Name]; seen && old > 0 && tr != old {
		lw.regrants++
	}
	lw.transitions[l.Name] = tr
	lw.fence[l.Name] = l.Annotations[fencingv1alpha1.AnnotationFence]
	if rt := l.Spec.RenewTime; rt != nil {
		lw.renewed[l.Name] = rt.Time
	}
}

func (lw *leaseWatch) reset() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.writes, lw.regrants = 0, 0
}

func (lw *leaseWatch) counts() (int, int) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.writes, lw.regrants
}

// renewedSince counts the Leases last renewed at or after t.
func (lw *leaseWatch) renewedSince(t time.Time) int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	n := 0
	for _, rt := range lw.renewed {
		if !rt.Before(t) {
			n++
		}
	}
	return n
}

func (lw *leaseWatch) fences() map[string]string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	out := make(map[string]string, len(lw.fence))
	for k, v := range lw.fence {
		out[k] = v
	}
	return out
}
