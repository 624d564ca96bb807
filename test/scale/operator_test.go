//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// buildOperator builds the manager binary and writes a kubeconfig for it.
func buildOperator(t *testing.T) (bin, kubeconfig string) {
	dir := t.TempDir()
	bin = filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the manager: %v\n%s", err, out)
	}
	au, err := env.AddUser(envtest.User{Name: "fencedlease-scale", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := au.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, kubeconfig
}

// operator is the manager binary running as a process, with its metrics
// endpoint on a free loopback port.
type operator struct {
	cmd     *exec.Cmd
	out     *harness.SyncBuffer
	done    chan struct{}
	metrics string
	// pprof is the base URL of its profiles, when SCALE_PPROF is set.
	pprof   string
	started time.Time
	// seq counts the processes started by this test binary, from 0.
	seq int
}

// started counts the operator processes started.
var started atomic.Int64

func startOperator(t *testing.T, ctx context.Context, bin, kubeconfig string, extra ...string) *operator {
	addr, err := harness.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	op := &operator{out: &harness.SyncBuffer{}, done: make(chan struct{}), metrics: "http://" + addr + "/metrics", seq: int(started.Add(1) - 1)}
	args := append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--enable-webhooks=false",
		"--metrics-bind-address=" + addr, "--metrics-secure=false", "--health-probe-bind-address=0", "--namespace=default", "--zap-log-level=info"}, extra...)
	if os.Getenv("SCALE_PPROF") != "" {
		paddr, err := harness.FreeAddress()
		if err != nil {
			t.Fatal(err)
		}
		op.pprof = "http://" + paddr + "/debug/pprof"
		args = append(args, "--pprof-bind-address="+paddr)
	}
	// SCALE_OPERATOR_FLAGS adds flags, e.g. --concurrent-reconciles=32.
	args = append(args, strings.Fields(os.Getenv("SCALE_OPERATOR_FLAGS"))...)
	op.cmd = exec.CommandContext(ctx, bin, args...)
	op.cmd.Stdout, op.cmd.Stderr = op.out, op.out
	op.started = time.Now()
	if err := op.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = op.cmd.Wait(); close(op.done) }()
	t.Cleanup(func() {
		op.stop()
		if f := os.Getenv("SCALE_OPERATOR_LOG"); f != "" {
			// One file per process: the first as named, the restarted ones
			// with .1, .2, ... appended.
			if n := op.seq; n > 0 {
				f = fmt.Sprintf("%s.%d", f, n)
			}
			_ = os.WriteFile(f, []byte(op.output()), 0o644)
		}
		if t.Failed() {
			t.Logf("operator output (last 4 KiB):\n%s", tail(op.output(), 4096))
		}
	})
	return op
}

// profile writes the operator's profile kind (heap, or profile: CPU over
// 30 s) to $SCALE_PPROF/operator-name.pprof, when SCALE_PPROF is set.
func (o *operator) profile(ctx context.Context, t *testing.T, kind, name string) {
	if o.pprof == "" {
		return
	}
	url := o.pprof + "/" + kind
	if kind == "profile" {
		url += "?seconds=30"
	}
	saveProfile(ctx, t, http.DefaultClient, url, "operator-"+name)
}

// stop kills the process, as a crash or a node's loss would, and waits.
func (o *operator) stop() {
	_ = o.cmd.Process.Kill()
	<-o.done
}

func (o *operator) output() string { return o.out.String() }

func (o *operator) running() bool {
	select {
	case <-o.done:
		return false
	default:
		return true
	}
}

// cpu is the user and system time the process used so far.
func (o *operator) cpu() time.Duration { return cpuOf(o.cmd.Process.Pid) }

// rss is the resident set size of the process, in bytes.
func (o *operator) rss() int64 { return rssOf(o.cmd.Process.Pid) }

// cpuOf is the user and system time process pid used so far.
func cpuOf(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// rssOf is the resident set size of process pid, in bytes.
func rssOf(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
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

// scrape reads the operator's metrics: every sample line, by its name and
// labels as written.
func (o *operator) scrape() (map[string]float64, error) {
	resp, err := http.Get(o.metrics) //nolint:gosec,noctx // the test's own loopback endpoint
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", o.metrics, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", o.metrics, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// scrapeOr is the operator's metrics, or none if they cannot be read.
func scrapeOr(o *operator) map[string]float64 {
	m, err := o.scrape()
	if err != nil {
		return map[string]float64{}
	}
	return m
}

// queueLatency is the distribution of the time FencedLeases waited in the
// controller's work queue between two scrapes
// (workqueue_queue_duration_seconds of controller-runtime): quantiles by
// linear interpolation within the histogram's buckets.
type queueLatency struct {
	Count float64 `json:"count"`
	P50   float64 `json:"p50_s"`
	P90   float64 `json:"p90_s"`
	P99   float64 `json:"p99_s"`
	Mean  float64 `json:"mean_s"`
}

func queueLatencyBetween(before, after map[string]float64) queueLatency {
	const name = `workqueue_queue_duration_seconds`
	const label = `name="fencedlease"`
	type bucket struct{ le, n float64 }
	var buckets []bucket
	for k, v := range after {
		if !strings.HasPrefix(k, name+"_bucket{") || !strings.Contains(k, label) {
			continue
		}
		i := strings.Index(k, `le="`)
		le := k[i+4 : i+4+strings.IndexByte(k[i+4:], '"')]
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		buckets = append(buckets, bucket{bound, v - before[k]})
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	var q queueLatency
	sum, count := "", ""
	for k := range after {
		if strings.Contains(k, label) && strings.HasPrefix(k, name+"_sum") {
			sum = k
		}
		if strings.Contains(k, label) && strings.HasPrefix(k, name+"_count") {
			count = k
		}
	}
	q.Count = after[count] - before[count]
	if q.Count == 0 {
		return q
	}
	q.Mean = (after[sum] - before[sum]) / q.Count
	quantile := func(p float64) float64 {
		rank, lo, below := p*q.Count, 0.0, 0.0
		for _, b := range buckets {
			if b.n >= rank {
				if math.IsInf(b.le, 1) {
					return lo
				}
				return lo + (b.le-lo)*(rank-below)/math.Max(b.n-below, 1e-9)
			}
			lo, below = b.le, b.n
		}
		return lo
	}
	q.P50, q.P90, q.P99 = quantile(0.5), quantile(0.9), quantile(0.99)
	return q
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// paceLines are the lines of an operator's log in which its pace says that
// first grants stop or start being admitted (controllers/fencedlease,
// pacer.report), in order.
func paceLines(log string) []string {
	var out []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "First grants wait") || strings.Contains(line, "Admitting first grants again") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}
