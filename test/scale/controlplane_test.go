//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// controlPlane is the kube-apiserver and etcd this test process started:
// the operator shares the machine with them, and at thousands of leases
// they, not the operator, set how far it goes.
type controlPlane struct {
	apiserver, etcd int // process IDs, 0 when not found
}

// findControlPlane finds the kube-apiserver and etcd among the children of
// this process.
func findControlPlane() controlPlane {
	var cp controlPlane
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(s[closing+2:])
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		switch s[open+1 : closing] {
		case "kube-apiserver":
			cp.apiserver = pid
		case "etcd":
			cp.etcd = pid
		}
	}
	return cp
}

// sample is the control plane's CPU time used so far.
type cpSample struct{ apiserver, etcd time.Duration }

func (cp controlPlane) sample() cpSample {
	return cpSample{apiserver: cpuOf(cp.apiserver), etcd: cpuOf(cp.etcd)}
}

// usage is what the control plane used between two samples over elapsed,
// with its largest RSS seen.
type controlPlaneUsage struct {
	APIServerCPUPercent float64 `json:"apiserver_cpu_percent"`
	EtcdCPUPercent      float64 `json:"etcd_cpu_percent"`
	APIServerMaxRSSMiB  float64 `json:"apiserver_max_rss_mib"`
}

func usageBetween(a, b cpSample, elapsed time.Duration, maxRSS int64) controlPlaneUsage {
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / elapsed.Seconds() }
	return controlPlaneUsage{APIServerCPUPercent: pct(b.apiserver - a.apiserver), EtcdCPUPercent: pct(b.etcd - a.etcd),
		APIServerMaxRSSMiB: float64(maxRSS) / (1 << 20)}
}

// profileAPIServer writes a CPU profile of the kube-apiserver over d to
// $SCALE_PPROF/name.pprof, when SCALE_PPROF names a directory: where the
// API server's time goes at this many leases.
func profileAPIServer(ctx context.Context, t *testing.T, cfg *rest.Config, name string, d time.Duration) {
	if os.Getenv("SCALE_PPROF") == "" {
		return
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Logf("profile the API server: %v", err)
		return
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), int(d.Seconds()))
	saveProfile(ctx, t, hc, url, name)
}

// saveProfile fetches a profile from url into $SCALE_PPROF/name.pprof.
func saveProfile(ctx context.Context, t *testing.T, hc *http.Client, url, name string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Logf("profile %s: %v", name, err)
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Logf("profile %s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("profile %s: %s: %v", name, resp.Status, err)
		return
	}
	out := filepath.Join(os.Getenv("SCALE_PPROF"), name+".pprof")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Logf("profile %s: %v", name, err)
		return
	}
	t.Logf("profile %s: %s", name, out)
}
