package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// holdership is where fence run learns that this pod holds the lease: the
// token files (the kubelet's copy of the pod's annotations), or a Session
// that follows the Lease and, with holder renewal, renews its own grants.
type holdership interface {
	HolderContext(ctx context.Context) (context.Context, fence.Token, error)
	// Release tells the operator that the work under the grant with that
	// fence has stopped; a no-op when nothing can be released.
	Release(ctx context.Context, fence int64) error
	// Deadline is when this pod's own validity of the grant with that fence
	// ends (holder renewal; it moves on with every renewal), and lead how
	// long before it the command is asked to stop; ok is false when there
	// is none (the operator renews, and the files say when the grant ended).
	// Changed is closed when the deadline may have moved.
	Deadline(fence int64, grace time.Duration) (deadline time.Time, lead time.Duration, ok bool)
	Changed() <-chan struct{}
	Close() error
}

// files learns holdership from the token files.
type files struct{ *fence.Watcher }

func (files) Release(context.Context, int64) error { return nil }

func (files) Deadline(int64, time.Duration) (time.Time, time.Duration, bool) {
	return time.Time{}, 0, false
}

func (files) Changed() <-chan struct{} { return nil }

// lease learns holdership from a Session.
type lease struct{ *fence.Session }

func (l lease) Release(ctx context.Context, fence int64) error { return l.ReleaseGrant(ctx, fence) }

// Deadline is the Session's deadline of the grant. The command is asked to
// stop grace before it, but no earlier than half way between the next
// renewal falling due and the deadline: a renewal that succeeds in time
// moves the deadline on before the command is ever asked to stop.
func (l lease) Deadline(fence int64, grace time.Duration) (time.Time, time.Duration, bool) {
	d, ok := l.Session.Deadline(fence)
	if !ok {
		return time.Time{}, 0, false
	}
	lead := grace
	if g, held := l.Current(); held && g.Fence == fence && g.HolderRenews {
		lead = min(lead, max(g.Deadline.Sub(g.Renewed.Add(g.RenewInterval))/2, 0))
	}
	return d, lead, true
}

func (l lease) HolderContext(ctx context.Context) (context.Context, fence.Token, error) {
	hctx, g, err := l.Session.HolderContext(ctx)
	if err != nil {
		return nil, fence.Token{}, err
	}
	return hctx, fence.Token{Role: fence.RoleHolder, Fence: g.Fence, Lease: g.Lease}, nil
}

// runner runs the command while this pod holds the lease.
type runner struct {
	argv   []string
	grace  time.Duration
	h      holdership
	sigs   chan os.Signal
	stderr io.Writer
}

// Values of --renewal.
const (
	renewalAuto     = "auto"
	renewalHolder   = "holder"
	renewalOperator = "operator"
)

// runCommand implements fence run.
func runCommand(args []string, stderr io.Writer) (int, error) {
	fs, dir := newFlags("run", stderr)
	grace := fs.Duration("grace-period", 10*time.Second, "time between SIGTERM and SIGKILL when holdership is lost")
	poll := fs.Duration("poll-interval", fence.DefaultPollInterval, "how often the token files are re-read in case an event was missed")
	renewal := fs.String("renewal", renewalAuto, "how holdership is learned: holder (follow the Lease through the API server and, with holder renewal, renew it; needs get, watch and update on it), operator (the token files only), or auto (holder when the API server lets this pod read its Lease, operator otherwise)")
	margin := fs.Duration("margin", fence.DefaultMargin, "with holder renewal: how long before its grant would expire on the operator's clock this pod stops on its own")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if *renewal != renewalAuto && *renewal != renewalHolder && *renewal != renewalOperator {
		return exitUsage, &usageError{fmt.Sprintf("run: --renewal=%q: want auto, holder or operator", *renewal)}
	}
	if err := positiveDuration("margin", *margin); err != nil {
		return exitUsage, err
	}
	if err := positiveDuration("grace-period", *grace); err != nil {
		return exitUsage, err
	}
	if err := positiveDuration("poll-interval", *poll); err != nil {
		return exitUsage, err
	}
	if fs.NArg() == 0 {
		return exitUsage, &usageError{"run: missing command after --"}
	}

	// Subscribe before anything else so that no signal is lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	r := &runner{argv: fs.Args(), grace: *grace, sigs: sigs, stderr: stderr}
	h, err := r.holdership(*dir, *poll, *renewal, *margin)
	if err != nil {
		return exitFailure, fmt.Errorf("run: %w", err)
	}
	defer h.Close()
	r.h = h
	return r.loop()
}

// holdership picks where holdership is learned. The token files name the
// FencedLease; with --renewal=holder (or auto, when the API server lets this
// pod read its Lease) a Session follows the Lease itself.
func (r *runner) holdership(dir string, poll time.Duration, renewal string, margin time.Duration) (holdership, error) {
	w, err := fence.New(dir, fence.WithPollInterval(poll))
	if err != nil {
		return nil, err
	}
	if renewal == renewalOperator {
		return files{w}, nil
	}
	tok, err := w.Current()
	if err == nil && tok.Lease == "" {
		err = errors.New("the lease file is empty: no FencedLease selects this pod yet")
	}
	if err != nil && renewal == renewalAuto {
		return files{w}, nil // the files' own error, if any, is reported when they are read
	}
	var s *fence.Session
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err = fence.NewSession(ctx, fence.SessionConfig{Lease: tok.Lease, Margin: margin,
			Logf: func(format string, args ...any) { r.logf(format, args...) }})
		cancel()
	}
	switch {
	case err == nil:
		_ = w.Close()
		r.logf("following Lease %s through the API server as pod %s", tok.Lease, s.Pod())
		return lease{s}, nil
	case renewal == renewalHolder:
		_ = w.Close()
		return nil, fmt.Errorf("--renewal=holder: %w", err)
	}
	r.logf("following the token files (%v)", err)
	return files{w}, nil
}

// loop alternates between waiting for holdership and running the command.
func (r *runner) loop() (int, error) {
	for {
		code, done, err := r.once()
		if done || err != nil {
			return code, err
		}
	}
}

// held is the outcome of waiting for holdership.
type held struct {
	ctx context.Context
	tok fence.Token
	err error
}

// once waits for one holdership and runs the command under it. done is
// true when fence run must exit with code.
func (r *runner) once() (code int, done bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan held, 1)
	go func() {
		hctx, tok, err := r.h.HolderContext(ctx)
		res <- held{hctx, tok, err}
	}()
	var h held
	select {
	case sig := <-r.sigs:
		// Nothing runs: a standby stops cleanly.
		r.logf("received %v while waiting for holdership; exiting", sig)
		return 0, true, nil
	case h = <-res:
	}
	if h.err != nil {
		return exitFailure, true, fmt.Errorf("run: %w", h.err)
	}
	return r.supervise(h.ctx, h.tok)
}

// supervise starts the command and follows it until it exits, is stopped
// because holdership ended, or fence run is told to terminate.
func (r *runner) supervise(hctx context.Context, tok fence.Token) (int, bool, error) {
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Env = append(os.Environ(), "FENCE_TOKEN="+strconv.FormatInt(tok.Fence, 10), "FENCE_LEASE="+tok.Lease)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Its own process group, so that a stop reaches its children too; and
	// killed if fence run dies, so that it never runs unsupervised.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return startFailure(err), true, fmt.Errorf("run: start %s: %w", r.argv[0], err)
	}
	r.logf("%s: started %s (pid %d)", tok, r.argv[0], cmd.Process.Pid)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	st := &stopping{}
	lost := hctx.Done()
	for {
		soft, hard := r.deadline(tok.Fence, st)
		select {
		case <-exited:
			soft.Stop()
			hard.Stop()
			// The command has exited: its work under this grant is over. Hand
			// the grant over at once rather than let it expire, also when the
			// operator revoked it (a pod being deleted is revoked at once);
			// the release changes nothing when the Lease has moved on.
			// The stop is said before the release, so that a reader of the
			// log sees it ahead of whatever the release lets happen.
			code := exitStatus(cmd.ProcessState)
			again := st.asked && !st.terminating
			if again {
				r.logf("%s (pid %d) stopped (%v); waiting for holdership", r.argv[0], cmd.Process.Pid, cmd.ProcessState)
			}
			r.release(tok)
			return code, !again, nil
		case sig := <-r.sigs:
			st.terminating = true
			r.signal(cmd, sig.(syscall.Signal))
		case <-lost:
			lost = nil
			r.logf("%v; stopping %s (pid %d)", context.Cause(hctx), r.argv[0], cmd.Process.Pid)
			st.ask(r, cmd, time.Now().Add(r.grace))
		case <-soft.C:
			r.logDeadline(tok, cmd)
			st.ask(r, cmd, time.Time{})
		case <-hard.C:
			if !st.asked {
				// Continued long past the deadline, both timers are due and
				// the kill may be chosen first: it is still the deadline
				// that stops the command, said as such, and fence run then
				// waits for holdership again as after any lost grant.
				r.logDeadline(tok, cmd)
				st.asked = true
			}
			if !st.killed {
				st.killed = true
				if deadline, _, ok := r.h.Deadline(tok.Fence, r.grace); ok && (st.killBy.IsZero() || deadline.Before(st.killBy)) {
					r.logf("%s (pid %d) did not stop by the deadline of its grant; killing it", r.argv[0], cmd.Process.Pid)
				} else {
					r.logf("%s (pid %d) did not stop within %v; killing it", r.argv[0], cmd.Process.Pid, r.grace)
				}
				r.signal(cmd, syscall.SIGKILL)
			}
		case <-r.h.Changed():
		}
		soft.Stop()
		hard.Stop()
	}
}

// stopping is how far supervise got in stopping the command.
type stopping struct {
	// asked: SIGTERM was sent because holdership ended or is about to.
	asked bool
	// killBy is when SIGKILL follows, if the grant's deadline does not come
	// first; zero: at the deadline.
	killBy time.Time
	// terminating: fence run itself was told to stop.
	terminating bool
	killed      bool
}

// ask sends SIGTERM once, and sets when SIGKILL follows.
func (st *stopping) ask(r *runner, cmd *exec.Cmd, killBy time.Time) {
	if st.asked {
		return
	}
	st.asked, st.killBy = true, killBy
	r.signal(cmd, syscall.SIGTERM)
}

// deadline arms the timers of a stop: soft fires when the command is to be
// asked to stop (lead before the grant's deadline, with holder renewal),
// hard when it is to be killed: a grace period after it was asked, and never
// later than the deadline, past which another pod may hold the lease. With
// the operator renewing there is no deadline, only the grace period after
// the files said the grant ended.
func (r *runner) deadline(fence int64, st *stopping) (soft, hard *time.Timer) {
	never := func() *time.Timer {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	soft, hard = never(), never()
	deadline, lead, ok := r.h.Deadline(fence, r.grace)
	if ok && !st.asked {
		soft = time.NewTimer(time.Until(deadline.Add(-lead)))
	}
	kill := st.killBy
	if ok && (kill.IsZero() || deadline.Before(kill)) {
		kill = deadline
	}
	if !kill.IsZero() && (st.asked || ok) && !st.killed {
		hard = time.NewTimer(time.Until(kill))
	}
	return soft, hard
}

// release ends this pod's grant at once (with a Session, which logs what it
// did); an unknown outcome is not retried: the grant then expires.
func (r *runner) release(tok fence.Token) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.h.Release(ctx, tok.Fence); err != nil {
		r.logf("%v", err)
	}
}

// signal sends sig to the command's process group.
func (r *runner) signal(cmd *exec.Cmd, sig syscall.Signal) {
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.logf("send %v to process group %d: %v", sig, cmd.Process.Pid, err)
	}
}

// logDeadline says that the grant ended by this pod's own clock.
func (r *runner) logDeadline(tok fence.Token, cmd *exec.Cmd) {
	r.logf("the grant with fence %d was not renewed and ends by this pod's clock at its deadline; stopping %s (pid %d)",
		tok.Fence, r.argv[0], cmd.Process.Pid)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.stderr, "fence: "+format+"\n", args...)
}

// exitStatus maps a finished process to a shell-style exit status.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// startFailure maps a start error to the status env(1) uses.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNoFound
	}
	return exitNoExec
}
