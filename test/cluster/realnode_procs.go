package cluster

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// allPids lists the machine's processes.
func allPids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// processesInNamespace lists the processes whose mount namespace is ns (as
// /proc/<pid>/ns/mnt names it, "mnt:[…]"); none when ns is empty.
func processesInNamespace(ns string) []int {
	if ns == "" {
		return nil
	}
	var out []int
	for _, pid := range allPids() {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == ns && !gone(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// parentOf returns the parent of pid, 0 if it is gone.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// descendants lists the processes that descend from one of roots and are
// not roots themselves: the containers under the node's shims.
func descendants(roots []int) []int {
	if len(roots) == 0 {
		return nil
	}
	parent := map[int]int{}
	for _, pid := range allPids() {
		parent[pid] = parentOf(pid)
	}
	var out []int
	for pid := range parent {
		if slices.Contains(roots, pid) {
			continue
		}
		for p := parent[pid]; p > 1; p = parent[p] {
			if slices.Contains(roots, p) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// killAll sends SIGKILL to every pid and waits, a few seconds at most,
// until they are gone.
func killAll(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for !gone(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// cgroupProcesses lists the processes in the cgroup dir and its children.
func cgroupProcesses(dir string) []int {
	var out []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// removeCgroup removes the cgroup dir and its children, deepest first (a
// cgroup is removed with rmdir, once it has no process and no child).
func removeCgroup(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		var rmErr error
		for range 50 {
			if rmErr = syscall.Rmdir(dirs[i]); rmErr == nil || os.IsNotExist(rmErr) {
				rmErr = nil
				break
			}
			// A process that was just killed leaves its cgroup a moment
			// later.
			time.Sleep(100 * time.Millisecond)
		}
		if rmErr != nil {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], rmErr)
		}
	}
	return nil
}

// waitNoProcessIn waits until no process is left in the mount namespace ns
// (the namespace, and its mounts, are gone then).
func waitNoProcessIn(ns string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := processesInNamespace(ns)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v are still in the node's mount namespace %s", left, ns)
		}
		killAll(left)
	}
}
