package holder_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/test/harness"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// This file runs holders as real processes: fence run, built from
// ./cmd/fence, with the pod's bound service-account token where the kubelet
// would project it, and testdata/child as its workload, which logs when it
// starts, works and stops. Every time is a wall-clock time of this one
// machine: the operator's acquireTime, the holder's renewTime (the send time
// of its renewal) and the child's log lines are comparable.

// binaries are fence, the child it runs, and goholder (a Go program that
// holds with pkg/fence's Session itself).
type binaries struct{ fence, child, goholder string }

// buildBinaries builds them into a temporary directory of t.
// $HOLDER_TEST_BUILDFLAGS adds go build flags: with -overlay, a broken
// variant of pkg/fence can be built into them without touching the tree,
// to check that these tests catch it.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	dir := t.TempDir()
	b := binaries{fence: filepath.Join(dir, "fence"), child: filepath.Join(dir, "child"), goholder: filepath.Join(dir, "goholder")}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds fence for this test: %v", err)
	}
	for out, pkg := range map[string]string{b.fence: "github.com/fencedlease/fencedlease/cmd/fence", b.child: "./testdata/child",
		b.goholder: "./testdata/goholder"} {
		args := append([]string{"build", "-o", out}, strings.Fields(os.Getenv("HOLDER_TEST_BUILDFLAGS"))...)
		cmd := exec.Command(goBin, append(args, pkg)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, o)
		}
	}
	return b
}

// apiAddr is host:port of the API server.
func apiAddr() string {
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		panic(err)
	}
	return u.Host
}

// credentials writes what the kubelet projects into the pod at
// /var/run/secrets/kubernetes.io/serviceaccount: a token bound to the pod by
// the TokenRequest API, the cluster's CA and the namespace.
func (f *fixture) credentials(pod *corev1.Pod) string {
	token, err := testenv.PodToken(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	dir := f.t.TempDir()
	for name, content := range map[string][]byte{"token": []byte(token), "ca.crt": env.Config.CAData, "namespace": []byte(pod.Namespace)} {
		f.g.Expect(os.WriteFile(filepath.Join(dir, name), content, 0o600)).To(Succeed())
	}
	return dir
}

// holderOptions say how a holder process runs.
type holderOptions struct {
	// API is host:port where the pod reaches the API server (a proxy, to cut
	// it off); the API server itself when empty.
	API string
	// Renewal is fence run's --renewal; holder when empty.
	Renewal string
	// Margin is fence run's --margin; 500ms when 0.
	Margin time.Duration
	// Files are the pod's token files; when nil, a standby token naming
	// Lease is written once (with --renewal holder fence run needs only the
	// lease name from them).
	Files *fencetest.KubeletWriter
	// Lease is the FencedLease; db when empty.
	Lease string
	// Go runs goholder instead of fence run: the holder is a Go program
	// with a Session of its own, not a supervisor of a child.
	Go bool
	// Grace is fence run's --grace-period; 1s when 0.
	Grace time.Duration
	// ChildIgnoresTerm makes the child go on working after SIGTERM, until
	// it is killed.
	ChildIgnoresTerm bool
}

// holderProc is a running `fence run -- child` (or goholder) acting as one
// pod.
type holderProc struct {
	name     string
	pod      *corev1.Pod
	files    *fencetest.KubeletWriter
	cmd      *exec.Cmd
	childLog string
	out      *harness.LineLog
	exited   chan struct{}
	frozen   []int // process groups stopped by freeze
}

// startHolder starts fence run for the pod, in a process group of its own.
// Its output is logged when the test fails, or always with
// $HOLDER_TEST_LOG set.
func (f *fixture) startHolder(bin binaries, pod *corev1.Pod, o holderOptions) *holderProc {
	if o.API == "" {
		o.API = apiAddr()
	}
	if o.Renewal == "" {
		o.Renewal = "holder"
	}
	if o.Margin == 0 {
		o.Margin = 500 * time.Millisecond
	}
	if o.Lease == "" {
		o.Lease = "db"
	}
	if o.Grace == 0 {
		o.Grace = time.Second
	}
	if o.Files == nil {
		k, err := fencetest.NewKubeletWriter(filepath.Join(f.t.TempDir(), "fencedlease"))
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(k.Standby(o.Lease)).To(Succeed())
		o.Files = k
	}
	host, port, _ := strings.Cut(o.API, ":")
	p := &holderProc{name: pod.Name, pod: pod, files: o.Files, childLog: filepath.Join(f.t.TempDir(), "child.log"),
		out: &harness.LineLog{}, exited: make(chan struct{})}
	if o.Go {
		p.cmd = exec.Command(bin.goholder)
	} else {
		p.cmd = exec.Command(bin.fence, "run", "--dir", o.Files.Dir(), "--renewal", o.Renewal, "--margin", o.Margin.String(),
			"--grace-period", o.Grace.String(), "--", bin.child)
	}
	p.cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "FENCE_") || strings.HasPrefix(kv, "KUBERNETES_SERVICE_")
	}), "FENCE_SERVICEACCOUNT_DIR="+f.credentials(pod), "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port,
		"CHILD_LOG="+p.childLog, "CHILD_BEAT=50ms", "LEASE="+o.Lease, "MARGIN="+o.Margin.String())
	if o.ChildIgnoresTerm {
		p.cmd.Env = append(p.cmd.Env, "CHILD_IGNORE_TERM=1")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	f.g.Expect(p.cmd.Start()).To(Succeed())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	f.t.Cleanup(func() {
		// Leave nothing behind: fence run's group, then each child's.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		for _, e := range p.events() {
			_ = syscall.Kill(-e.PID, syscall.SIGKILL)
		}
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			f.t.Errorf("fence run of pod %s (pid %d) did not exit", p.name, p.cmd.Process.Pid)
		}
		switch {
		case f.t.Failed():
			f.t.Logf("fence run of pod %s:\n%s\nits child's log:\n%s", p.name, p.out, p.logText())
		case os.Getenv("HOLDER_TEST_LOG") != "":
			f.t.Logf("fence run of pod %s:\n%s", p.name, p.out)
		}
	})
	return p
}

// childEvent is one line of the child's log.
type childEvent struct {
	Kind  string // start, beat, term or stop
	At    time.Time
	Token int64
	PID   int
}

func (p *holderProc) logText() string {
	b, _ := os.ReadFile(p.childLog)
	return string(b)
}

// events parses the child's log (complete lines only).
func (p *holderProc) events() []childEvent {
	data, _ := os.ReadFile(p.childLog)
	var out []childEvent
	for line := range strings.Lines(string(data)) {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		token := record.FenceOf(f[2])
		pid, _ := strconv.Atoi(f[3])
		out = append(out, childEvent{Kind: f[0], At: time.Unix(0, ns), Token: token, PID: pid})
	}
	return out
}

// starts returns the start events of the children, in order.
func (p *holderProc) starts() []childEvent {
	return slices.DeleteFunc(p.events(), func(e childEvent) bool { return e.Kind != "start" })
}

// stopOf returns the stop event of the child with that pid: the stop line
// it wrote, or, when fence run killed it (a child resumed past its deadline
// is killed at once, with no time to write one), an event of kind "killed"
// at the time fence run's report of it reached this process: no earlier
// than the child's end.
func (p *holderProc) stopOf(pid int) (childEvent, bool) {
	for _, e := range p.events() {
		if e.Kind == "stop" && e.PID == pid {
			return e, true
		}
	}
	killed := "(pid " + strconv.Itoa(pid) + ") stopped (signal: killed)"
	for _, l := range p.out.Lines() {
		if strings.Contains(l.Text, killed) {
			return childEvent{Kind: "killed", At: l.At, PID: pid}, true
		}
	}
	return childEvent{}, false
}

// deadlineStop is how fence run says that it stops a child because the
// grant with that fence was not renewed by its deadline.
func deadlineStop(fence int64) string {
	return fmt.Sprintf("the grant with fence %d was not renewed and ends by this pod's clock at its deadline", fence)
}

// lastOf returns the last event of the child with that pid.
func (p *holderProc) lastOf(pid int) (childEvent, bool) {
	var last childEvent
	ok := false
	for _, e := range p.events() {
		if e.PID == pid {
			last, ok = e, true
		}
	}
	return last, ok
}

// waitStart waits until the child has started n times and returns the nth
// start.
func (p *holderProc) waitStart(ctx context.Context, n int, timeout time.Duration) (childEvent, error) {
	deadline := time.Now().Add(timeout)
	for {
		if s := p.starts(); len(s) >= n {
			return s[n-1], nil
		}
		select {
		case <-p.exited:
			return childEvent{}, fmt.Errorf("fence run of pod %s exited (%v)", p.name, p.cmd.ProcessState)
		case <-ctx.Done():
			return childEvent{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return childEvent{}, fmt.Errorf("the child of pod %s did not start %d times within %s", p.name, n, timeout)
		}
	}
}

// waitStop waits until the child with that pid stopped (stopOf).
func (p *holderProc) waitStop(ctx context.Context, pid int, timeout time.Duration) (childEvent, error) {
	deadline := time.Now().Add(timeout)
	for {
		if e, ok := p.stopOf(pid); ok {
			return e, nil
		}
		select {
		case <-ctx.Done():
			return childEvent{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return childEvent{}, fmt.Errorf("the child %d of pod %s did not stop within %s", pid, p.name, timeout)
		}
	}
}

// freeze stops fence run and its running child with SIGSTOP, as when the
// container is frozen or the machine stalls: fence run first (its belief is
// what matters), then the child's process group.
func (p *holderProc) freeze() error {
	p.frozen = []int{p.cmd.Process.Pid}
	if s := p.starts(); len(s) > 0 {
		p.frozen = append(p.frozen, s[len(s)-1].PID)
	}
	for _, pg := range p.frozen {
		if err := syscall.Kill(-pg, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("stop process group %d: %w", pg, err)
		}
	}
	return nil
}

// thaw continues what freeze stopped, fence run first. Continued past its
// deadline, fence run may kill and reap its child before the child's group
// is continued: a group that is gone is not an error.
func (p *holderProc) thaw() error {
	for _, pg := range p.frozen {
		if err := syscall.Kill(-pg, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("continue process group %d: %w", pg, err)
		}
	}
	return nil
}

// lossLine finds the line in which fence run says why it stopped the
// child of that pid: the deadline passed, or the Lease moved on.
func (p *holderProc) lossLine(pid int) (harness.TimedLine, bool) {
	for _, l := range p.out.Lines() {
		if strings.Contains(l.Text, "; stopping ") && strings.Contains(l.Text, "(pid "+strconv.Itoa(pid)+")") {
			return l, true
		}
	}
	return harness.TimedLine{}, false
}

// waitEndReason waits for endReason: the process's output reaches this
// process through a pipe, possibly after what the child wrote to its log.
func (p *holderProc) waitEndReason(ctx context.Context, fence int64, timeout time.Duration) (string, error) {
	var why string
	err := p.waitOutput(ctx, timeout, fmt.Sprintf("why its grant with fence %d ended", fence), func() (ok bool) {
		why, ok = p.endReason(fence)
		return ok
	})
	return why, err
}

// waitLossLine waits for lossLine.
func (p *holderProc) waitLossLine(ctx context.Context, pid int, timeout time.Duration) (harness.TimedLine, error) {
	var line harness.TimedLine
	err := p.waitOutput(ctx, timeout, fmt.Sprintf("why it stopped child %d", pid), func() (ok bool) {
		line, ok = p.lossLine(pid)
		return ok
	})
	return line, err
}

func (p *holderProc) waitOutput(ctx context.Context, timeout time.Duration, what string, done func() bool) error {
	deadline := time.Now().Add(timeout)
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s did not say %s within %s", p.name, what, timeout)
		}
	}
	return nil
}

// endReason is why the Session (of fence run or goholder) says it ended
// the grant with that fence, the last time it did.
func (p *holderProc) endReason(fence int64) (string, bool) {
	prefix := "fence: No longer holding the grant with fence " + strconv.FormatInt(fence, 10) + ": "
	why, found := "", false
	for _, l := range p.out.Lines() {
		if rest, ok := strings.CutPrefix(l.Text, prefix); ok {
			why, found = rest, true
		}
	}
	return why, found
}

var deadlineAgo = regexp.MustCompile(`No longer holding the grant with fence (\d+): .*no successful renewal .* \(deadline (\S+) ago\)`)

// deadlinePassedBy is how long ago, by its own clock, the holder's
// deadline of the grant with that fence had passed when its Session ended
// the grant for it ("deadline X ago", rounded to the millisecond), the last
// time it did; false when the deadline did not end it.
func (p *holderProc) deadlinePassedBy(fence int64) (time.Duration, bool) {
	var ago time.Duration
	found := false
	for _, l := range p.out.Lines() {
		m := deadlineAgo.FindStringSubmatch(l.Text)
		if m == nil || m[1] != strconv.FormatInt(fence, 10) {
			continue
		}
		if d, err := time.ParseDuration(m[2]); err == nil {
			ago, found = d, true
		}
	}
	return ago, found
}

// leaseVersion is one version of the Lease, as a watch delivered it.
type leaseVersion struct {
	Seen        time.Time // when the watch delivered it to this process
	RV          string
	Holder      types.UID
	State       string
	Fence       int64
	Transitions int32
	AcquireTime time.Time
	RenewTime   time.Time
}

// leaseRecorder keeps every version of one Lease.
type leaseRecorder struct {
	mu       sync.Mutex
	versions []leaseVersion
}

// recordLease watches the Lease of FencedLease name from now on (call it
// before the FencedLease is created to see every version).
func (f *fixture) recordLease(name string) *leaseRecorder {
	cs, err := kubernetes.NewForConfig(env.Config)
	f.g.Expect(err).NotTo(HaveOccurred())
	r := &leaseRecorder{}
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + name}
	w, err := cs.CoordinationV1().Leases(f.ns).Watch(f.ctx, opts)
	f.g.Expect(err).NotTo(HaveOccurred())
	go func() {
		for {
			for ev := range w.ResultChan() {
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					r.add(l)
					opts.ResourceVersion = l.ResourceVersion
				}
			}
			for {
				if f.ctx.Err() != nil {
					return
				}
				if w, err = cs.CoordinationV1().Leases(f.ns).Watch(f.ctx, opts); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return r
}

func (r *leaseRecorder) add(l *coordinationv1.Lease) {
	v := leaseVersion{Seen: time.Now(), RV: l.ResourceVersion, Holder: types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]),
		State: l.Annotations[fencingv1alpha1.LeaseAnnotationState]}
	v.Fence = record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence])
	if l.Spec.LeaseTransitions != nil {
		v.Transitions = *l.Spec.LeaseTransitions
	}
	if l.Spec.AcquireTime != nil {
		v.AcquireTime = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		v.RenewTime = l.Spec.RenewTime.Time
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, v)
}

func (r *leaseRecorder) all() []leaseVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.versions)
}

// dumpOnFailure logs every version, with times relative to origin, if the
// test fails.
func (r *leaseRecorder) dumpOnFailure(t *testing.T, origin time.Time) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rel := func(x time.Time) string {
			if x.IsZero() {
				return "-"
			}
			return fmt.Sprintf("%+.3fs", x.Sub(origin).Seconds())
		}
		var b strings.Builder
		for _, v := range r.all() {
			fmt.Fprintf(&b, "seen %s rv=%s holder=%s state=%s fence=%d transitions=%d acquireTime=%s renewTime=%s\n",
				rel(v.Seen), v.RV, v.Holder, v.State, v.Fence, v.Transitions, rel(v.AcquireTime), rel(v.RenewTime))
		}
		t.Logf("the Lease's versions (times from %s):\n%s", origin.Format("15:04:05.000000"), b.String())
	})
}

// wait waits for a version that matches and returns the first one.
func (r *leaseRecorder) wait(ctx context.Context, timeout time.Duration, what string, match func(leaseVersion) bool) (leaseVersion, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, v := range r.all() {
			if match(v) {
				return v, nil
			}
		}
		select {
		case <-ctx.Done():
			return leaseVersion{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return leaseVersion{}, fmt.Errorf("no version of the Lease %s within %s", what, timeout)
		}
	}
}

// grantTo waits for the first grant write that names the pod after
// transitions grants and returns it: AcquireTime is when the operator
// wrote it (taken just before the write was sent).
func (r *leaseRecorder) grantTo(ctx context.Context, uid types.UID, after int32, timeout time.Duration) (leaseVersion, error) {
	return r.wait(ctx, timeout, "granted to "+string(uid), func(v leaseVersion) bool { return v.Holder == uid && v.Transitions > after })
}

// committed returns the version that committed the grant with that
// transition count (state held, fence recorded).
func (r *leaseRecorder) committed(ctx context.Context, transitions int32, timeout time.Duration) (leaseVersion, error) {
	return r.wait(ctx, timeout, fmt.Sprintf("committing grant %d", transitions), func(v leaseVersion) bool {
		return v.Transitions == transitions && v.State == fencingv1alpha1.LeaseStateHeld && v.Fence > 0
	})
}

// lastRenewal returns the latest renewTime that any version of the grant
// with that transition count carries: with renewal Holder, the send time of
// the holder's latest renewal that the API server accepted.
func (r *leaseRecorder) lastRenewal(transitions int32) time.Time {
	var last time.Time
	for _, v := range r.all() {
		if v.Transitions == transitions && v.RenewTime.After(last) {
			last = v.RenewTime
		}
	}
	return last
}

// renewalsAfter returns the distinct renewTimes of the grant later than t.
func (r *leaseRecorder) renewalsAfter(transitions int32, t time.Time) []time.Time {
	var out []time.Time
	for _, v := range r.all() {
		if v.Transitions == transitions && v.RenewTime.After(t) && !slices.ContainsFunc(out, v.RenewTime.Equal) {
			out = append(out, v.RenewTime)
		}
	}
	return out
}

// dist is a sample of durations.
type dist []time.Duration

// pct is the p-th percentile (nearest rank).
func (d dist) pct(p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (d dist) String() string {
	if len(d) == 0 {
		return "n=0"
	}
	ms := func(x time.Duration) string {
		return strconv.FormatFloat(float64(x)/float64(time.Millisecond), 'f', 1, 64)
	}
	return fmt.Sprintf("n=%d min=%s p50=%s p90=%s p99=%s max=%s (ms)", len(d), ms(d.pct(0)), ms(d.pct(50)), ms(d.pct(90)), ms(d.pct(99)), ms(d.pct(100)))
}

// kubeletFiles plays the kubelet's part for the token files of pods in
// Operator renewal: it watches the pods and, when the operator's
// annotations on one change, rewrites its downward-API files at once with
// the kubelet's atomic writer. The kubelet's real delay (it updates the
// volume on its next sync of the pod: typically about a second, up to its
// sync period of a minute) is not simulated: only the file mechanics are.
type kubeletFiles struct {
	mu    sync.Mutex
	pods  map[types.UID]*fencetest.KubeletWriter
	shown map[types.UID]string
	swaps map[types.UID][]time.Time
}

func (f *fixture) kubeletFiles() *kubeletFiles {
	cs, err := kubernetes.NewForConfig(env.Config)
	f.g.Expect(err).NotTo(HaveOccurred())
	k := &kubeletFiles{pods: map[types.UID]*fencetest.KubeletWriter{}, shown: map[types.UID]string{}, swaps: map[types.UID][]time.Time{}}
	w, err := cs.CoreV1().Pods(f.ns).Watch(f.ctx, metav1.ListOptions{})
	f.g.Expect(err).NotTo(HaveOccurred())
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				if err := k.sync(pod); err != nil {
					f.t.Errorf("kubelet files of pod %s: %v", pod.Name, err)
				}
			}
		}
	}()
	return k
}

// volume returns the token files of the pod, showing a standby of lease
// until the operator annotates the pod.
func (k *kubeletFiles) volume(f *fixture, pod *corev1.Pod, lease string) *fencetest.KubeletWriter {
	w, err := fencetest.NewKubeletWriter(filepath.Join(f.t.TempDir(), "fencedlease"))
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(w.Standby(lease)).To(Succeed())
	k.mu.Lock()
	defer k.mu.Unlock()
	w.OnSwap = func() { k.swaps[pod.UID] = append(k.swaps[pod.UID], time.Now()) }
	k.pods[pod.UID] = w
	return w
}

func (k *kubeletFiles) sync(pod *corev1.Pod) error {
	role, fenceValue, lease := pod.Annotations[fencingv1alpha1.AnnotationRole], pod.Annotations[fencingv1alpha1.AnnotationFence], pod.Annotations[fencingv1alpha1.AnnotationLease]
	k.mu.Lock()
	w, shown := k.pods[pod.UID], k.shown[pod.UID]
	k.mu.Unlock()
	if w == nil || role == "" || role+"/"+fenceValue+"/"+lease == shown {
		return nil
	}
	if err := w.WriteToken(role, fenceValue, lease); err != nil {
		return err
	}
	k.mu.Lock()
	k.shown[pod.UID] = role + "/" + fenceValue + "/" + lease
	k.mu.Unlock()
	return nil
}

// swappedAfter returns the first time the pod's files were swapped after t.
func (k *kubeletFiles) swappedAfter(uid types.UID, t time.Time) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.swaps[uid] {
		if s.After(t) {
			return s, true
		}
	}
	return time.Time{}, false
}

// parallelRuns runs n runs of one proof as parallel subtests of t (at most
// -parallel at once), named by name(i), and returns what each measured; it
// stops t if any run failed.
func parallelRuns[R any](t *testing.T, n int, name func(int) string, run func(*testing.T, int) R) []R {
	runs := make([]R, n)
	t.Run("runs", func(t *testing.T) {
		for i := range n {
			t.Run(name(i), func(t *testing.T) { runs[i] = run(t, i) })
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	return runs
}
