package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
	"github.com/fencedlease/fencedlease/test/harness"
)

// fenceBin is the fence binary built once for all tests.
var fenceBin string

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.Binaries))
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fence-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fenceBin = filepath.Join(dir, "fence")
	build := exec.Command("go", "build", "-o", fenceBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fence: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// Generous bounds: they only limit how long a broken implementation hangs.
const (
	eventually = 20 * time.Second
	poll       = 20 * time.Millisecond
)

// result is how a fence invocation ended.
type result struct {
	code           int
	stdout, stderr string
}

// fenceCmd runs fence to completion.
func fenceCmd(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(fenceBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run fence: %v", err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func newKubelet(t *testing.T) *fencetest.KubeletWriter {
	t.Helper()
	k, err := fencetest.NewKubeletWriter(filepath.Join(t.TempDir(), "fencedlease"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestToken(t *testing.T) {
	absent := filepath.Join(os.TempDir(), "fence-test-does-not-exist")
	absentMsg := `token files absent: label the pod fencedlease.io/inject: "true" so that the operator mounts them`
	tests := []struct {
		name               string
		role, fence, lease string // files written unless role is "-"
		args               []string
		want               result
	}{
		{name: "holder", role: "holder", fence: "42", lease: "db", want: result{code: 0, stdout: "42\n"}},
		{
			name: "standby", role: "standby", fence: "", lease: "db",
			want: result{code: 1, stderr: "fence: token: this pod is standby of lease \"db\", not the holder\n"},
		},
		{
			name: "malformed", role: "holder", fence: "007", lease: "db",
			want: result{code: 2, stderr: "fence: token: malformed token file DIR/fence: invalid fence \"007\": leading zero\n"},
		},
		{
			name: "absent", role: "-", args: []string{"--dir", absent},
			want: result{code: 2, stderr: "fence: token: read " + absent + ": " + absentMsg + "\n"},
		},
		{
			name: "extra argument", role: "holder", fence: "42", lease: "db", args: []string{"now"},
			want: result{code: 2, stderr: "fence: token: unexpected argument \"now\"\nRun 'fence help' for usage.\n"},
		},
		{
			name: "unknown flag", role: "holder", fence: "42", lease: "db", args: []string{"--bogus"},
			want: result{code: 2, stderr: "fence: token: flag provided but not defined: -bogus\nRun 'fence help' for usage.\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			k := newKubelet(t)
			if tt.role != "-" {
				g.Expect(k.WriteToken(tt.role, tt.fence, tt.lease)).To(Succeed())
			}
			// FENCE_DIR sets the default directory.
			got := fenceCmd(t, []string{"FENCE_DIR=" + k.Dir()}, append([]string{"token"}, tt.args...)...)
			tt.want.stderr = strings.ReplaceAll(tt.want.stderr, "DIR", k.Dir())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestTokenDirFlagOverridesEnv(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Holder(9, "db")).To(Succeed())
	got := fenceCmd(t, []string{"FENCE_DIR=/nonexistent"}, "token", "--dir", k.Dir())
	g.Expect(got).To(Equal(result{code: 0, stdout: "9\n"}))
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "version", args: []string{"version"}, wantStdout: "fence dev\n"},
		{name: "help", args: []string{"help"}, wantStdout: usage},
		{name: "run help", args: []string{"run", "-h"}, wantStdout: usage},
		{name: "no command", wantCode: 2, wantStderr: "fence: missing command\n\n" + usage},
		{name: "unknown", args: []string{"lock"}, wantCode: 2, wantStderr: "fence: unknown command \"lock\"\nRun 'fence help' for usage.\n"},
		{name: "run without command", args: []string{"run", "--"}, wantCode: 2, wantStderr: "fence: run: missing command after --\nRun 'fence help' for usage.\n"},
		{name: "bad grace", args: []string{"run", "--grace-period", "0s", "--", "true"}, wantCode: 2, wantStderr: "fence: --grace-period 0s: must be positive\nRun 'fence help' for usage.\n"},
		{
			name: "bad duration", args: []string{"run", "--poll-interval", "soon", "--", "true"}, wantCode: 2,
			wantStderr: "fence: run: invalid value \"soon\" for flag -poll-interval: parse error\nRun 'fence help' for usage.\n",
		},
		{
			name: "run absent files", args: []string{"run", "--dir", "/nonexistent/fencedlease", "--", "true"}, wantCode: 125,
			wantStderr: "fence: run: read /nonexistent/fencedlease: token files absent: label the pod fencedlease.io/inject: \"true\" so that the operator mounts them\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := fenceCmd(t, nil, tt.args...)
			g.Expect(got).To(Equal(result{code: tt.wantCode, stdout: tt.wantStdout, stderr: tt.wantStderr}))
		})
	}
}

// processGone reports whether pid no longer runs: it does not exist, or it
// is a zombie that its new parent has not reaped yet.
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
