package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestDownStopsProgramsPausedOrLinked: a program started beside the
// cluster (as a pod process is) through a symbolic link to its binary,
// then paused with SIGSTOP, is tracked as running, listed, and stopped by
// Down: continued, it handles its SIGTERM (rather than being killed after
// the grace period); no process and no pid file is left. The cluster's own
// components, not running, are left alone.
func TestDownStopsProgramsPausedOrLinked(t *testing.T) {
	g := NewWithT(t)
	sh, err := exec.LookPath("sh")
	g.Expect(err).NotTo(HaveOccurred())
	sleep, err := exec.LookPath("sleep")
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	link := filepath.Join(dir, "linked-sh")
	g.Expect(os.Symlink(sh, link)).To(Succeed())
	c, err := New(Config{Dir: dir})
	g.Expect(err).NotTo(HaveOccurred())

	termed := filepath.Join(dir, "handled-sigterm")
	ready := filepath.Join(dir, "trap-set")
	script := "trap 'touch " + termed + "; exit 0' TERM; touch " + ready + "; while :; do sleep 0.1; done"
	g.Expect(c.start(process{name: "pod-a", bin: link, args: []string{"-c", script}})).To(Succeed())
	g.Expect(c.start(process{name: "operator-x", bin: sleep, args: []string{"60"}})).To(Succeed())
	pid, ok := c.pid("pod-a")
	g.Expect(ok).To(BeTrue(), "a program started through a link runs")
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	g.Eventually(func() string { return ready }).Should(BeAnExistingFile())
	g.Expect(syscall.Kill(-pid, syscall.SIGSTOP)).To(Succeed())
	g.Expect(c.Processes()).To(HaveKey("pod-a"))
	g.Expect(c.Processes()).To(HaveKey("operator-x"))
	g.Expect(c.programs()).To(ConsistOf("pod-a", "operator-x"))

	g.Expect(c.Down()).To(Succeed())
	g.Expect(gone(pid)).To(BeTrue(), "the paused program is gone")
	g.Expect(termed).To(BeAnExistingFile(), "the paused program handled its SIGTERM")
	g.Expect(c.Processes()).To(BeEmpty())
	entries, err := os.ReadDir(filepath.Join(dir, "run"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty(), "no pid file is left")
}

// TestStopFindsAWrappedProcessBeforeItExecutes: a process started through
// a wrapper (as a real node's are, through unshare and nsenter) and stopped
// before the wrapper has executed its binary is stopped all the same: it
// leaves no process. Stop used to find the pid running the wrapper, not the
// binary, take it for gone, and leave it to execute and run on.
func TestStopFindsAWrappedProcessBeforeItExecutes(t *testing.T) {
	g := NewWithT(t)
	sleep, err := exec.LookPath("sleep")
	g.Expect(err).NotTo(HaveOccurred())
	c, err := New(Config{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.start(process{name: "wrapped", bin: sleep, args: []string{"60"},
		wrap: []string{"sh", "-c", `sleep 1; exec "$0" "$@"`}})).To(Succeed())
	pid, ok := c.pid("wrapped")
	g.Expect(ok).To(BeTrue(), "the wrapped process runs while its wrapper does")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	g.Expect(c.stop("wrapped", 5*time.Second)).To(Succeed())
	time.Sleep(1500 * time.Millisecond)
	g.Expect(gone(pid)).To(BeTrue(), "the wrapped process is gone")
}
