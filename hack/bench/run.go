package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// meta describes a run: when, where, how, and the machine's load meanwhile.
type meta struct {
	Mode    string         `json:"mode"`
	Command string         `json:"command"`
	Started time.Time      `json:"started"`
	Ended   time.Time      `json:"ended"`
	CPUs    int            `json:"cpus"`
	CPU     string         `json:"cpu"`
	Go      string         `json:"go"`
	Steps   map[string]job `json:"steps"`
}

// job is one test binary's run.
type job struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Failed  bool      `json:"failed"`
	// Load is the 1-minute load average, sampled every 10 s.
	Load []float64 `json:"load"`
}

func run(dir, mode, command string, p plan, parts []string) error {
	m := meta{Mode: mode, Command: command, Started: time.Now().UTC(),
		CPUs: runtime.NumCPU(), CPU: cpuModel(), Go: runtime.Version(), Steps: map[string]job{}}
	if old, err := os.ReadFile(filepath.Join(dir, "meta.json")); err == nil {
		_ = json.Unmarshal(old, &m) // a partial rerun keeps the steps already run
		m.Mode, m.Command = mode, command
	}
	save := func() error {
		m.Ended = time.Now().UTC()
		return writeJSON(filepath.Join(dir, "meta.json"), m)
	}
	var failed []string
	step := func(name string, env []string, args ...string) {
		fmt.Printf("== %s: go %s\n", name, strings.Join(args, " "))
		j := runGo(filepath.Join(dir, name+".log"), env, args...)
		m.Steps[name] = j
		if j.Failed {
			failed = append(failed, name)
		}
		fmt.Printf("== %s: %.0f s, failed %v, load %v\n", name, j.Seconds, j.Failed, j.Load)
		_ = save()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if slices.Contains(parts, "failover") {
		step("failover", []string{"BENCH_HANDOFFS=" + strconv.Itoa(p.handoffs), "BENCH_GROUPS=" + strconv.Itoa(p.groups),
			"BENCH_OUT=" + filepath.Join(abs, "failover.json")},
			"test", "-tags", "bench", "-count=1", "-v", "-timeout", "60m", "-run", "^TestFailover$", "./test/bench")
	}
	if slices.Contains(parts, "admission") {
		step("admission", nil, "test", "-run", "^$", "-bench", "AdmissionLatency", "-benchtime", p.admission,
			"-count", strconv.Itoa(p.admissionCount), "./internal/webhook/protected/")
	}
	if slices.Contains(parts, "scale") {
		for _, r := range p.scale {
			name := fmt.Sprintf("scale-%d", r.leases)
			step(name, []string{"SCALE_LEASES=" + strconv.Itoa(r.leases), "SCALE_STEADY=" + r.steady.String(),
				"SCALE_WINDOW=" + p.window.String(), "SCALE_COLD_TIMEOUT=" + r.cold.String(), "SCALE_CLIENTGO_GROUPS=" + strconv.Itoa(min(r.leases, 1000)),
				"SCALE_OUT=" + filepath.Join(abs, name+".json")},
				"test", "-tags", "scale", "-count=1", "-v", "-timeout", "90m", "-run", "^TestScale$", "./test/scale")
		}
	}
	if err := save(); err != nil {
		return err
	}
	if len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "bench: failed: %s (see their logs in %s)\n", strings.Join(failed, ", "), dir)
	}
	return nil
}

// runGo runs go with args, its output into log, sampling the load average.
func runGo(log string, env []string, args ...string) job {
	j := job{Started: time.Now().UTC()}
	f, err := os.Create(log)
	if err != nil {
		j.Failed = true
		return j
	}
	defer f.Close()
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	done := make(chan struct{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			if l, ok := load(); ok {
				mu.Lock()
				j.Load = append(j.Load, l)
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	err = cmd.Run()
	close(done)
	wg.Wait()
	j.Seconds = time.Since(j.Started).Seconds()
	j.Failed = err != nil
	if err != nil {
		fmt.Fprintf(f, "\nbench: %v\n", err)
	}
	return j
}

func load() (float64, bool) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v, err == nil
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}
