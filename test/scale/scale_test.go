//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

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
// (15 s leases, renewed every 5 s), and measures: the time from the first
// FencedLease until every one is held and published (a cold start), then
// SCALE_STEADY of steady state, in which no grant may change (zero
// re-grants, the same fence on every lease), with the Lease writes per
// second and the operator's CPU and memory.
func TestScale(t *testing.T) {
	leases, podsPer := envInt("SCALE_LEASES", 1000), envInt("SCALE_PODS", 2)
	steady := envDuration("SCALE_STEADY", 10*time.Minute)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cfg := *env.Config
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(&cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	ns, err := testenv.Namespace(ctx, c, "scale")
	g.Expect(err).NotTo(HaveOccurred())
	for i := 0; i < 10; i++ {
		g.Expect(testenv.EnsureNode(ctx, c, fmt.Sprintf("scale-node-%d", i))).To(Succeed())
	}

	// The pods first (they take longest to create), then the operator, then
	// the FencedLeases: the clock starts at the first FencedLease.
	start := time.Now()
	parallel(leases, 16, func(i int) {
		for p := 0; p < podsPer; p++ {
			pod, err := testenv.CreatePod(ctx, c, testenv.Pod{Namespace: ns, Name: fmt.Sprintf("fl-%d-%d", i, p),
				Labels: map[string]string{"app": fmt.Sprintf("fl-%d", i)}, Node: fmt.Sprintf("scale-node-%d", (i+p)%10)})
			if err == nil {
				err = testenv.SetReady(ctx, c, pod, start.Add(-time.Duration(p+1)*time.Minute))
			}
			if err != nil {
				t.Error(err)
			}
		}
	})
	t.Logf("%d pods created and ready in %s", leases*podsPer, time.Since(start).Round(time.Second))

	op := startOperator(t, ctx)
	w := watchLeases(t, ctx, c, ns)

	created := time.Now()
	parallel(leases, 16, func(i int) {
		fl := testenv.FencedLease(ns, fmt.Sprintf("fl-%d", i), map[string]string{"app": fmt.Sprintf("fl-%d", i)}, nil)
		if err := c.Create(ctx, fl); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%d FencedLeases created in %s", leases, time.Since(created).Round(time.Millisecond))
	var allHeld time.Duration
	g.Eventually(func() int {
		held := publishedHolders(ctx, t, c, ns)
		allHeld = time.Since(created)
		return held
	}).WithTimeout(20*time.Minute).WithPolling(time.Second).Should(Equal(leases), "every FencedLease held and published")
	t.Logf("cold start: all %d FencedLeases held and published %s after the first was created", leases, allHeld.Round(100*time.Millisecond))

	// Steady state.
	fences := w.fences()
	w.reset()
	cpu0, at0 := op.cpu(), time.Now()
	var maxRSS int64
	for time.Since(at0) < steady {
		time.Sleep(10 * time.Second)
		if rss := op.rss(); rss > maxRSS {
			maxRSS = rss
		}
		g.Expect(op.running()).To(BeTrue(), "the operator exited:\n%s", op.output())
	}
	elapsed := time.Since(at0)
	cpu := op.cpu() - cpu0
	writes, regrants := w.counts()
	now := w.fences()
	changed := 0
	for name, f := range fences {
		if now[name] != f {
			changed++
		}
	}
	t.Logf("steady state for %s: %d Lease writes (%.1f/s, %.3f/s per lease), %d re-grants, %d fences changed; operator CPU %.1f%% of one core, max RSS %d MiB",
		elapsed.Round(time.Second), writes, float64(writes)/elapsed.Seconds(), float64(writes)/elapsed.Seconds()/float64(leases),
		regrants, changed, 100*cpu.Seconds()/elapsed.Seconds(), maxRSS>>20)
	g.Expect(regrants).To(BeZero(), "no grant changes in steady state")
	g.Expect(changed).To(BeZero(), "every lease keeps its fence")
	g.Expect(writes).To(BeNumerically(">", 0), "the operator renews")
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

// publishedHolders counts the FencedLeases whose holder pod is published
// with the fence the status records.
func publishedHolders(ctx context.Context, t *testing.T, c client.Client, ns string) int {
	var fls fencingv1alpha1.FencedLeaseList
	var pods corev1.PodList
	if err := c.List(ctx, &fls, client.InNamespace(ns)); err != nil {
		t.Log(err)
		return -1
	}
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
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

// leaseWatch counts the Lease writes and re-grants of a namespace.
type leaseWatch struct {
	mu          sync.Mutex
	writes      int
	regrants    int
	transitions map[string]int32
	fence       map[string]string
}

func watchLeases(t *testing.T, ctx context.Context, c client.WithWatch, ns string) *leaseWatch {
	w, err := c.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	lw := &leaseWatch{transitions: map[string]int32{}, fence: map[string]string{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			lw.mu.Lock()
			lw.writes++
			tr := ptr.Deref(l.Spec.LeaseTransitions, 0)
			if old, seen := lw.transitions[l.Name]; seen && tr != old {
				lw.regrants++
			}
			lw.transitions[l.Name] = tr
			lw.fence[l.Name] = l.Annotations[fencingv1alpha1.AnnotationFence]
			lw.mu.Unlock()
		}
	}()
	return lw
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

func (lw *leaseWatch) fences() map[string]string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	out := make(map[string]string, len(lw.fence))
	for k, v := range lw.fence {
		out[k] = v
	}
	return out
}

// operator is the manager binary running as a process.
type operator struct {
	cmd  *exec.Cmd
	out  *strings.Builder
	mu   sync.Mutex
	done chan struct{}
}

func startOperator(t *testing.T, ctx context.Context) *operator {
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the manager: %v\n%s", err, out)
	}
	au, err := env.AddUser(envtest.User{Name: "fencedlease-scale", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := au.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	op := &operator{out: &strings.Builder{}, done: make(chan struct{})}
	op.cmd = exec.CommandContext(ctx, bin, "--kubeconfig="+path, "--leader-elect=false", "--enable-webhooks=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--namespace=default", "--zap-log-level=info")
	op.cmd.Stdout, op.cmd.Stderr = op, op
	if err := op.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = op.cmd.Wait(); close(op.done) }()
	t.Cleanup(func() {
		_ = op.cmd.Process.Kill()
		<-op.done
		if f := os.Getenv("SCALE_OPERATOR_LOG"); f != "" {
			_ = os.WriteFile(f, []byte(op.output()), 0o644)
		}
		if t.Failed() {
			t.Logf("operator output (last 4 KiB):\n%s", tail(op.output(), 4096))
		}
	})
	return op
}

func (o *operator) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.Write(p)
}

func (o *operator) output() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.String()
}

func (o *operator) running() bool {
	select {
	case <-o.done:
		return false
	default:
		return true
	}
}

// cpu is the user and system time the process used so far.
func (o *operator) cpu() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// rss is the resident set size of the process, in bytes.
func (o *operator) rss() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
