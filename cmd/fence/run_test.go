package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/test/harness"
)

// childScript logs "start TOKEN LEASE PID" and, on SIGTERM,
// "stop TOKEN PID" before exiting with $STOP_STATUS.
const childScript = `echo "start $FENCE_TOKEN $FENCE_LEASE $$" >> "$LOG"
trap 'echo "stop $FENCE_TOKEN $$" >> "$LOG"; exit ${STOP_STATUS:-0}' TERM
while :; do sleep 1 & wait $!; done`

// stubbornScript ignores SIGTERM, and so does the grandchild it logs.
const stubbornScript = `trap '' TERM
echo "start $FENCE_TOKEN $FENCE_LEASE $$" >> "$LOG"
sleep 1000 &
echo "grandchild $!" >> "$LOG"
wait`

// fenceRun is a running "fence run".
type fenceRun struct {
	cmd    *exec.Cmd
	log    string
	stderr *harness.SyncBuffer
	exited chan struct{}
}

// startRun starts fence run for dir with script as its command. fence run
// gets its own process group so that a test can pause it as a whole.
func startRun(t *testing.T, dir, script string, env ...string) *fenceRun {
	t.Helper()
	r := &fenceRun{log: filepath.Join(t.TempDir(), "child.log"), stderr: &harness.SyncBuffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(fenceBin, "run", "--dir", dir, "--renewal", "operator", "--grace-period", "500ms", "--poll-interval", "1s", "--", "/bin/sh", "-c", script)
	r.cmd.Env = append(append(os.Environ(), "LOG="+r.log), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.stderr, r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		// Leave no process behind, even after a failure: fence run's group,
		// then each child's group (which holds its grandchildren). The
		// children share fence run's output pipe, so fence run's Wait
		// returns only once they are gone too.
		select {
		case <-r.exited:
		default:
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		}
		for _, c := range r.children() {
			_ = syscall.Kill(-c.PID, syscall.SIGKILL)
		}
		select {
		case <-r.exited:
		case <-time.After(eventually):
			t.Errorf("fence run (pid %d) did not exit", r.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("fence run output:\n%s\nchild log:\n%s", r.stderr, r.logText())
		}
	})
	return r
}

func (r *fenceRun) logText() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}

// lines returns the child log, one entry per line.
func (r *fenceRun) lines() []string {
	return strings.FieldsFunc(r.logText(), func(c rune) bool { return c == '\n' })
}

// child is one child process seen in the log.
type child struct {
	Token   string
	PID     int
	Stopped bool // logged its SIGTERM
}

// children parses the log in start order.
func (r *fenceRun) children() []child {
	var cs []child
	for _, l := range r.lines() {
		f := strings.Fields(l)
		switch f[0] {
		case "start":
			pid, _ := strconv.Atoi(f[len(f)-1])
			cs = append(cs, child{Token: f[1], PID: pid})
		case "stop":
			pid, _ := strconv.Atoi(f[2])
			for i := range cs {
				if cs[i].PID == pid {
					cs[i].Stopped = true
				}
			}
		}
	}
	return cs
}

// exitCode waits for fence run to exit and returns its status.
func (r *fenceRun) exitCode(g *WithT) int {
	g.Eventually(r.exited).WithTimeout(eventually).Should(BeClosed())
	return r.cmd.ProcessState.ExitCode()
}

func (r *fenceRun) signal(g *WithT, sig syscall.Signal) {
	g.Expect(r.cmd.Process.Signal(sig)).To(Succeed())
}

func TestRunLifecycle(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Standby("db")).To(Succeed())
	r := startRun(t, k.Dir(), childScript, "STOP_STATUS=3")

	// A standby runs nothing.
	g.Consistently(r.lines).WithTimeout(300 * time.Millisecond).Should(BeEmpty())

	g.Expect(k.Holder(5, "db")).To(Succeed())
	g.Eventually(r.lines).WithTimeout(eventually).WithPolling(poll).Should(ConsistOf(HavePrefix("start 5 db ")))
	first := r.children()[0]

	// Loss stops the child, and nothing starts until this pod holds again.
	g.Expect(k.Standby("db")).To(Succeed())
	g.Eventually(r.children).WithTimeout(eventually).WithPolling(poll).Should(Equal([]child{{Token: "5", PID: first.PID, Stopped: true}}))
	g.Eventually(func() bool { return processGone(first.PID) }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Consistently(r.children).WithTimeout(500 * time.Millisecond).Should(HaveLen(1))
	g.Expect(r.exited).NotTo(BeClosed(), "fence run must keep waiting after a loss")

	// A new grant starts a new child with the new token.
	g.Expect(k.Holder(6, "db")).To(Succeed())
	g.Eventually(r.children).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(2))
	g.Expect(r.children()[1]).To(And(HaveField("Token", "6"), HaveField("Stopped", false)))

	// A fence change while holding is a new holdership: restart with it.
	g.Expect(k.Holder(7, "db")).To(Succeed())
	g.Eventually(r.children).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(3))
	cs := r.children()
	g.Expect(cs[1].Stopped).To(BeTrue())
	g.Expect(r.lines()).To(ContainElement(HavePrefix("start 7 db ")))

	// SIGTERM to fence run reaches the child; its status is fence run's.
	r.signal(g, syscall.SIGTERM)
	g.Expect(r.exitCode(g)).To(Equal(3))
	g.Expect(r.children()[2]).To(And(HaveField("Token", "7"), HaveField("Stopped", true)))
	g.Expect(r.children()).To(HaveLen(3))
}

func TestRunKillsAfterGracePeriod(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Holder(10, "db")).To(Succeed())
	r := startRun(t, k.Dir(), stubbornScript)
	g.Eventually(r.lines).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(2))
	pid := r.children()[0].PID
	grandchild, err := strconv.Atoi(strings.TrimPrefix(r.lines()[1], "grandchild "))
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(k.Standby("db")).To(Succeed())
	g.Eventually(func() bool { return processGone(pid) }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	// The whole process group is killed, not only the child.
	g.Eventually(func() bool { return processGone(grandchild) }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Expect(r.stderr.String()).To(ContainSubstring("fence: /bin/sh (pid " + strconv.Itoa(pid) + ") did not stop within 500ms; killing it"))
	g.Expect(r.exited).NotTo(BeClosed())

	g.Expect(k.Holder(11, "db")).To(Succeed())
	g.Eventually(r.children).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(2))
	g.Expect(r.children()[1].Token).To(Equal("11"))
}

func TestRunExitStatus(t *testing.T) {
	tests := []struct {
		name     string
		argv     []string
		signal   syscall.Signal // sent to fence run once the child started
		wantCode int
		wantErr  string
	}{
		{name: "exit status", argv: []string{"/bin/sh", "-c", `echo "start $FENCE_TOKEN $FENCE_LEASE $$" >> "$LOG"; exit 7`}, wantCode: 7},
		{name: "success", argv: []string{"/bin/sh", "-c", `echo "start $FENCE_TOKEN $FENCE_LEASE $$" >> "$LOG"`}, wantCode: 0},
		{name: "killed", argv: []string{"/bin/sh", "-c", `echo "start $FENCE_TOKEN $FENCE_LEASE $$" >> "$LOG"; kill -KILL $$`}, wantCode: 137},
		{name: "interrupt forwarded", argv: []string{"/bin/sh", "-c", childScript}, signal: syscall.SIGINT, wantCode: 130},
		{name: "terminate forwarded", argv: []string{"/bin/sh", "-c", childScript}, signal: syscall.SIGTERM, wantCode: 0},
		{name: "not found", argv: []string{"/nonexistent/cmd"}, wantCode: 127, wantErr: "fence: run: start /nonexistent/cmd: fork/exec /nonexistent/cmd: no such file or directory\n"},
		{name: "not executable", argv: []string{"DIR"}, wantCode: 126, wantErr: "fence: run: start DIR: fork/exec DIR: permission denied\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			k := newKubelet(t)
			g.Expect(k.Holder(20, "db")).To(Succeed())
			tmp := t.TempDir()
			log := filepath.Join(tmp, "log")
			argv := slices.Clone(tt.argv)
			if argv[0] == "DIR" { // a directory cannot be executed
				argv[0] = tmp
				tt.wantErr = strings.ReplaceAll(tt.wantErr, "DIR", tmp)
			}
			cmd := exec.Command(fenceBin, append([]string{"run", "--dir", k.Dir(), "--"}, argv...)...)
			cmd.Env = append(os.Environ(), "LOG="+log)
			stderr := &harness.SyncBuffer{}
			cmd.Stderr = stderr
			g.Expect(cmd.Start()).To(Succeed())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				b, _ := os.ReadFile(log)
				if f := strings.Fields(string(b)); len(f) == 4 {
					if pid, err := strconv.Atoi(f[3]); err == nil {
						_ = syscall.Kill(-pid, syscall.SIGKILL)
					}
				}
			})
			if tt.signal != 0 {
				g.Eventually(func() string { b, _ := os.ReadFile(log); return string(b) }).
					WithTimeout(eventually).WithPolling(poll).Should(HavePrefix("start 20 db "))
				g.Expect(cmd.Process.Signal(tt.signal)).To(Succeed())
			}
			var err error
			g.Eventually(done).WithTimeout(eventually).Should(Receive(&err))
			var exitErr *exec.ExitError
			if tt.wantCode != 0 {
				g.Expect(errors.As(err, &exitErr)).To(BeTrue(), "err: %v", err)
			}
			g.Expect(cmd.ProcessState.ExitCode()).To(Equal(tt.wantCode), stderr.String())
			if tt.wantErr != "" {
				g.Expect(stderr.String()).To(HaveSuffix(tt.wantErr))
			}
		})
	}
}

func TestRunStandbyExitsOnSignal(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Standby("db")).To(Succeed())
	r := startRun(t, k.Dir(), childScript)
	g.Eventually(r.stderr.String).WithTimeout(eventually).WithPolling(poll).Should(BeEmpty())
	g.Consistently(r.exited).WithTimeout(200 * time.Millisecond).ShouldNot(BeClosed())
	r.signal(g, syscall.SIGTERM)
	g.Expect(r.exitCode(g)).To(Equal(0))
	g.Expect(r.lines()).To(BeEmpty())
	g.Expect(r.stderr.String()).To(Equal("fence: received terminated while waiting for holdership; exiting\n"))
}

// TestRunPauseResume is the seeds' stale holder: A holds fence 41 and is
// paused as a whole (fence run and its child); the lease moves to B with
// fence 42; A resumes. At no point do two children run with the current
// token, and A's child is stopped once A runs again.
func TestRunPauseResume(t *testing.T) {
	g := NewWithT(t)
	ka, kb := newKubelet(t), newKubelet(t)
	g.Expect(ka.Holder(41, "db")).To(Succeed())
	g.Expect(kb.Standby("db")).To(Succeed())
	a := startRun(t, ka.Dir(), childScript)
	b := startRun(t, kb.Dir(), childScript)
	g.Eventually(a.children).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(1))
	aChild := a.children()[0]
	g.Expect(aChild.Token).To(Equal("41"))

	// Pause A: fence run's process group and its child's.
	pause := func(sig syscall.Signal) {
		g.Expect(syscall.Kill(-a.cmd.Process.Pid, sig)).To(Succeed())
		g.Expect(syscall.Kill(-aChild.PID, sig)).To(Succeed())
	}
	pause(syscall.SIGSTOP)

	// The operator moves the lease while A cannot see it.
	g.Expect(ka.Standby("db")).To(Succeed())
	g.Expect(kb.Holder(42, "db")).To(Succeed())
	g.Eventually(b.children).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(1))
	g.Expect(b.children()[0].Token).To(Equal("42"))
	g.Consistently(func() []child { return running("42", a, b) }).WithTimeout(300 * time.Millisecond).Should(HaveLen(1))

	pause(syscall.SIGCONT)
	g.Eventually(a.children).WithTimeout(eventually).WithPolling(poll).Should(Equal([]child{{Token: "41", PID: aChild.PID, Stopped: true}}))
	g.Eventually(func() bool { return processGone(aChild.PID) }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	g.Consistently(a.children).WithTimeout(500 * time.Millisecond).Should(HaveLen(1))
	g.Expect(running("42", a, b)).To(HaveLen(1))
	g.Expect(b.children()[0].Stopped).To(BeFalse())
	g.Expect(a.exited).NotTo(BeClosed())
	g.Expect(b.exited).NotTo(BeClosed())
}

// running returns the children started with token that have not stopped
// and still exist.
func running(token string, runs ...*fenceRun) []child {
	var out []child
	for _, r := range runs {
		for _, c := range r.children() {
			if c.Token == token && !c.Stopped && !processGone(c.PID) {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestRunMalformed: fence run refuses to guess from malformed files.
func TestRunMalformed(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.WriteToken("holder", "007", "db")).To(Succeed())
	got := fenceCmd(t, nil, "run", "--dir", k.Dir(), "--", "/bin/true")
	g.Expect(got).To(Equal(result{
		code:   125,
		stderr: "fence: run: malformed token file " + filepath.Join(k.Dir(), "fence") + ": invalid fence \"007\": leading zero\n",
	}))
}

// TestRunKilledTakesChildAlong: a child must not outlive a killed fence run,
// or it would keep working with nobody to stop it on loss.
func TestRunKilledTakesChildAlong(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Holder(30, "db")).To(Succeed())
	r := startRun(t, k.Dir(), childScript)
	g.Eventually(r.children).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(1))
	r.signal(g, syscall.SIGKILL)
	pid := r.children()[0].PID
	g.Eventually(func() bool { return processGone(pid) }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
}

// TestRunAutoFallsBackToTheFiles: outside a pod there is no API server to
// follow the Lease through; --renewal auto says so once and follows the
// token files, --renewal holder refuses to start.
func TestRunAutoFallsBackToTheFiles(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Standby("db")).To(Succeed())
	out, err := exec.Command(fenceBin, "run", "--dir", k.Dir(), "--renewal", "holder", "--", "true").CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(Equal("fence: run: --renewal=holder: session: not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set\n"))

	cmd := exec.Command(fenceBin, "run", "--dir", k.Dir(), "--", "true")
	stderr := &harness.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	g.Expect(cmd.Start()).To(Succeed())
	g.Eventually(stderr.String).WithTimeout(eventually).WithPolling(poll).Should(Equal(
		"fence: following the token files (session: not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)\n"))
	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Expect(cmd.Wait()).To(Succeed())
}

// TestRunRejectsABadRenewal: a bad --renewal is a usage error.
func TestRunRejectsABadRenewal(t *testing.T) {
	g := NewWithT(t)
	out, err := exec.Command(fenceBin, "run", "--renewal", "sometimes", "--", "true").CombinedOutput()
	var exitErr *exec.ExitError
	g.Expect(errors.As(err, &exitErr)).To(BeTrue())
	g.Expect(exitErr.ExitCode()).To(Equal(2))
	g.Expect(string(out)).To(HavePrefix("fence: run: --renewal=\"sometimes\": want auto, holder or operator\n"))
}

// pastDeadline is a holdership whose grant's deadline has already passed,
// with no lead: the stop and the kill fall due at the same instant, as when
// fence run is continued long after its deadline. Asked again, it has no
// deadline any more: after the first stop or kill, the command's exit is
// all that is left to wait for, as on a loaded machine where the killed
// command is reaped before fence run looks at its timers again.
type pastDeadline struct {
	at    time.Time
	calls *int
}

func (pastDeadline) HolderContext(ctx context.Context) (context.Context, fence.Token, error) {
	return ctx, fence.Token{}, nil
}
func (pastDeadline) Release(context.Context, int64) error { return nil }
func (p pastDeadline) Deadline(int64, time.Duration) (time.Time, time.Duration, bool) {
	*p.calls++
	return p.at, 0, *p.calls == 1
}
func (pastDeadline) Changed() <-chan struct{} { return nil }
func (pastDeadline) Close() error             { return nil }

// TestRunStopsAtAPassedDeadlineAndSaysWhy: whichever of the due stop and
// kill fence run takes first, it says that the deadline stopped the
// command, reports how the command ended, and waits for holdership again
// rather than exit. Select picks among ready cases at random, so the kill
// comes first in about half of the runs.
func TestRunStopsAtAPassedDeadlineAndSaysWhy(t *testing.T) {
	for i := range 40 {
		g := NewWithT(t)
		out := &harness.SyncBuffer{}
		r := &runner{argv: []string{"/bin/sleep", "100"}, grace: time.Minute, h: pastDeadline{at: time.Now().Add(-time.Second), calls: new(int)},
			sigs: make(chan os.Signal), stderr: out}
		tok := fence.Token{Role: fence.RoleHolder, Fence: int64(100 + i), Lease: "db"}
		_, done, err := r.supervise(context.Background(), tok)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(done).To(BeFalse(), "run %d: fence run waits for holdership again\n%s", i, out)
		g.Expect(out.String()).To(ContainSubstring(fmt.Sprintf("the grant with fence %d was not renewed and ends by this pod's clock at its deadline; stopping /bin/sleep", tok.Fence)), "run %d", i)
		g.Expect(out.String()).To(MatchRegexp(`/bin/sleep \(pid \d+\) stopped \(signal: (terminated|killed)\); waiting for holdership`), "run %d", i)
	}
}
