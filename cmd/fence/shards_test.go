package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/test/harness"
)

// shardScript logs "start KEY FENCE PID" and, on SIGTERM, "stop KEY FENCE".
const shardScript = `echo "start $FENCE_SHARD $FENCE_TOKEN $$" >> "$LOG"
trap 'echo "stop $FENCE_SHARD $FENCE_TOKEN" >> "$LOG"; exit 0' TERM
while :; do sleep 1 & wait $!; done`

// One command per shard: a shard that leaves, or comes back with another
// fence, stops its command; a new one starts its own; the others run on.
func TestShardsRunOneCommandPerShard(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	write := func(v string) { g.Expect(k.Write(map[string]string{"shards": v})).To(Succeed()) }
	write(`{"a":"10","b":"11"}`)
	log := filepath.Join(t.TempDir(), "shards.log")
	cmd := exec.Command(fenceBin, "shards", "--dir", k.Dir(), "--grace-period", "500ms", "--poll-interval", "100ms", "--", "/bin/sh", "-c", shardScript)
	cmd.Env = append(os.Environ(), "LOG="+log)
	out := &harness.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.Expect(cmd.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	lines := func() []string {
		b, _ := os.ReadFile(log)
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(l); len(f) >= 3 {
				out = append(out, f[0]+" "+f[1]+" "+f[2])
			}
		}
		return out
	}
	g.Eventually(lines).WithTimeout(10 * time.Second).Should(ConsistOf("start a 10", "start b 11"))

	write(`{"a":"10","b":"12","c":"13"}`)
	g.Eventually(lines).WithTimeout(10*time.Second).Should(ConsistOf("start a 10", "start b 11", "stop b 11", "start b 12", "start c 13"), out.String())

	write(`{"c":"13"}`)
	g.Eventually(lines).WithTimeout(10*time.Second).Should(ContainElements("stop a 10", "stop b 12"), out.String())
	g.Consistently(lines).WithTimeout(500 * time.Millisecond).ShouldNot(ContainElement("stop c 13"))

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(exited).WithTimeout(10 * time.Second).Should(BeClosed())
	g.Expect(cmd.ProcessState.ExitCode()).To(BeZero())
	g.Expect(lines()).To(ContainElement("stop c 13"))
	g.Expect(lines()).To(HaveLen(8)) // four starts, four stops: nothing ran twice
}

// Without the shards file there is nothing to run: fence shards says why.
func TestShardsNeedTheFile(t *testing.T) {
	g := NewWithT(t)
	cmd := exec.Command(fenceBin, "shards", "--dir", t.TempDir(), "--", "true")
	out, err := cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(cmd.ProcessState.ExitCode()).To(Equal(exitFailure))
	g.Expect(string(out)).To(ContainSubstring("token files absent"))
}

// A command that exits while its shard stays is started again, with the
// same fence, after a delay that grows; once the shard leaves, it is not.
func TestShardsRestartACommandThatExits(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Write(map[string]string{"shards": `{"a":"10"}`})).To(Succeed())
	log := filepath.Join(t.TempDir(), "shards.log")
	cmd := exec.Command(fenceBin, "shards", "--dir", k.Dir(), "--restart-delay", "100ms", "--poll-interval", "100ms", "--",
		"/bin/sh", "-c", `echo "start $FENCE_SHARD $FENCE_TOKEN" >> "$LOG"; exit 3`)
	cmd.Env = append(os.Environ(), "LOG="+log)
	out := &harness.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	starts := func() []string {
		b, _ := os.ReadFile(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	g.Eventually(starts).WithTimeout(10*time.Second).Should(WithTransform(func(s []string) int { return len(s) }, BeNumerically(">=", 3)), out.String())
	g.Expect(starts()).To(HaveEach("start a 10"))
	g.Expect(out.String()).To(ContainSubstring("shard a: command exited while the shard stays; starting it again in 200ms"))

	g.Expect(k.Write(map[string]string{"shards": `{}`})).To(Succeed())
	g.Eventually(out.String).WithTimeout(10 * time.Second).Should(ContainSubstring("fence 10 lost"))
	n := len(starts())
	g.Consistently(func() int { return len(starts()) }).WithTimeout(time.Second).Should(Equal(n), out.String())
}
