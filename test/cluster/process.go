package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one program of the cluster. Its pid file, in the cluster's run
// directory, names the pid and the binary, so that Down stops exactly the
// processes Up started, and nothing else that happens to reuse a pid.
type process struct {
	name string
	bin  string
	args []string
	env  []string
	// wrap, when set, runs bin through another program that ends by
	// executing it (unshare, nsenter): the pid file still names bin.
	wrap []string
}

func (c *Cluster) pidFile(name string) string { return filepath.Join(c.Dir, "run", name+".pid") }

func (c *Cluster) logFile(name string) string { return filepath.Join(c.Dir, "logs", name+".log") }

// start runs the process in its own session, its output in the cluster's log
// directory. Detached (make cluster) it outlives the program that started
// it; attached (tests) it gets SIGKILL when that program dies.
func (c *Cluster) start(p process) error {
	if err := os.MkdirAll(filepath.Join(c.Dir, "run"), 0o700); err != nil {
		return err
	}
	c.specsMu.Lock()
	if c.specs == nil {
		c.specs = map[string]process{}
	}
	c.specs[p.name] = p
	c.specsMu.Unlock()
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(c.logFile(p.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "\n==> %s %s %s\n", time.Now().Format(time.RFC3339), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	if len(p.wrap) > 0 {
		cmd = exec.Command(p.wrap[0], slices.Concat(p.wrap[1:], []string{p.bin}, p.args)...)
	}
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !c.detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	pid := cmd.Process.Pid
	// /proc/<pid>/exe names the binary with symbolic links resolved (bin/k8s
	// may be a link to another clone's): so does the pid file.
	bin := p.bin
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved
	}
	content := fmt.Sprintf("%d\n%s\n", pid, bin)
	if len(p.wrap) > 0 {
		// Until the wrapper has executed bin, the process runs the
		// wrapper: a third line names it, so that stop finds it then too.
		w, err := exec.LookPath(p.wrap[0])
		if err == nil {
			w, err = filepath.EvalSymlinks(w)
		}
		if err == nil {
			content += w + "\n"
		}
	}
	if err := os.WriteFile(c.pidFile(p.name), []byte(content), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	// Reap it when it exits, so that a dead process is not a zombie that
	// still looks alive.
	go func() { _ = cmd.Wait() }()
	return nil
}

// restart starts the named process again as it was started last.
func (c *Cluster) restart(name string) error {
	c.specsMu.Lock()
	p, ok := c.specs[name]
	c.specsMu.Unlock()
	if !ok {
		return fmt.Errorf("%s was never started", name)
	}
	return c.start(p)
}

// pidNames lists the processes that have a pid file, running or not.
func (c *Cluster) pidNames() []string {
	entries, _ := os.ReadDir(filepath.Join(c.Dir, "run"))
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".pid"); ok {
			out = append(out, n)
		}
	}
	return out
}

// pid returns the pid of the named process if it is still running the
// binary it was started with.
func (c *Cluster) pid(name string) (int, bool) {
	b, err := os.ReadFile(c.pidFile(name))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 && len(lines) != 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(lines[0])
	if err != nil {
		return 0, false
	}
	if len(lines) == 3 && runs(pid, lines[2]) {
		return pid, true
	}
	return pid, runs(pid, lines[1])
}

// runs says whether pid is alive and runs bin.
func runs(pid int, bin string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || strings.TrimSuffix(exe, " (deleted)") != bin {
		return false
	}
	return !gone(pid)
}

// gone says whether pid has finished exiting: no such process, or every
// thread of it a zombie (its files, sockets included, are closed by then).
// A process in the middle of exiting may already have no executable link,
// and its first thread be a zombie, but still hold its listening sockets.
func gone(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	// A process's first thread turns zombie while its other threads are
	// still exiting, and its files (a listening socket among them) close
	// with the last one: every thread must be done.
	for _, t := range tasks {
		if !exited(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name())) {
			return false
		}
	}
	return true
}

// exited says whether the thread whose stat file is path is gone or a
// zombie.
func exited(path string) bool {
	stat, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// stop sends SIGTERM to the named process, then SIGKILL after grace, and
// waits until it is gone. A process paused with SIGSTOP is continued, with
// its process group (it leads its own session), so that it handles the
// SIGTERM.
func (c *Cluster) stop(name string, grace time.Duration) error {
	pid, ok := c.pid(name)
	defer os.Remove(c.pidFile(name))
	if !ok {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if gone(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for range 100 {
		if gone(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s (pid %d) did not stop", name, pid)
}

// kill sends SIGKILL at once: a crash.
func (c *Cluster) kill(name string) error {
	pid, ok := c.pid(name)
	if !ok {
		return fmt.Errorf("%s is not running", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	for range 100 {
		if gone(pid) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New(name + " did not die")
}

// controlPlaneNames are the names of the control plane's processes, of
// either layout (single or HA), in the order they start.
func controlPlaneNames() []string {
	return append((&Cluster{Config: Config{HA: true}, detached: true}).components(), controllerManager, scheduler, kwok, etcd, apiServer)
}

// programs are the processes started beside the cluster's own components
// (operators, pod processes): every pid file in the run directory that is
// not a component's.
func (c *Cluster) programs() []string {
	entries, _ := os.ReadDir(filepath.Join(c.Dir, "run"))
	var out []string
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".pid")
		if ok && !slices.Contains(controlPlaneNames(), n) {
			out = append(out, n)
		}
	}
	return out
}

// listenable says whether addr can be listened on now.
func listenable(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// waitListenable waits until addr can be listened on: a killed server's
// connections, orphaned, may hold its port for a moment after it is gone.
func waitListenable(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !listenable(addr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("port of %s still taken after %s", addr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
