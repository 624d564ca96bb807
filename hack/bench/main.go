// Command bench runs the benchmarks of make bench: failover against
// client-go's leader election (test/bench), the fencing webhook's admission
// latency (internal/webhook/protected) and scale (test/scale), each as its
// tagged test binary against its own kube-apiserver and etcd, one after the
// other; it gathers their JSON results and writes results.md and PNG plots
// into the output directory.
//
//	go run ./hack/bench            # quick: CI-sized, a few minutes
//	go run ./hack/bench -full      # the recorded numbers
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// plan is what one mode runs.
type plan struct {
	handoffs, groups int
	admission        string // -benchtime
	admissionCount   int
	scale            []scaleRun
	window           time.Duration
}

type scaleRun struct {
	leases int
	steady time.Duration
	// cold is how long the cold start may take before the run records how
	// far it got and stops.
	cold time.Duration
}

var quick = plan{handoffs: 20, groups: 10, admission: "300x", admissionCount: 1,
	scale: []scaleRun{{100, time.Minute, 5 * time.Minute}, {1000, 2 * time.Minute, 10 * time.Minute}}, window: 20 * time.Second}

var full = plan{handoffs: 100, groups: 10, admission: "1000x", admissionCount: 3,
	scale:  []scaleRun{{100, 2 * time.Minute, 5 * time.Minute}, {1000, 3 * time.Minute, 10 * time.Minute}, {10000, 10 * time.Minute, 10 * time.Minute}},
	window: time.Minute}

func main() {
	isFull := flag.Bool("full", false, "run the recorded configuration: 100 handoffs per configuration; 100, 1,000 and 10,000 leases")
	out := flag.String("out", "", "results directory (default bench-results/<UTC date and time>)")
	only := flag.String("only", "failover,admission,scale", "comma-separated parts to run")
	leases := flag.String("leases", "", "comma-separated lease counts for the scale part, replacing the mode's (steady state as for the nearest)")
	cold := flag.Duration("cold", 0, "how long a scale run's cold start may take, replacing the mode's")
	render := flag.Bool("render", false, "only render results.md and the plots from the JSON already in -out")
	flag.Parse()
	p, mode := quick, "quick"
	if *isFull {
		p, mode = full, "full"
	}
	if *leases != "" {
		var runs []scaleRun
		for _, f := range strings.Split(*leases, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				fail(fmt.Errorf("-leases %q: %q is not a positive number", *leases, f))
			}
			near := nearest(p, n)
			runs = append(runs, scaleRun{n, near.steady, near.cold})
		}
		p.scale = runs
	}
	if *cold > 0 {
		for i := range p.scale {
			p.scale[i].cold = *cold
		}
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("bench-results", time.Now().UTC().Format("2006-01-02T15-04"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	command := "make bench" + map[string]string{"full": " FULL=1"}[mode]
	if *leases != "" || *cold > 0 || *only != "failover,admission,scale" {
		// Not the configuration of make bench: the report names the run.
		command = "go run ./hack/bench " + strings.Join(os.Args[1:], " ")
	}
	if !*render {
		if err := run(dir, mode, command, p, strings.Split(*only, ",")); err != nil {
			fail(err)
		}
	}
	if err := report(dir); err != nil {
		fail(err)
	}
	fmt.Println("results:", filepath.Join(dir, "results.md"))
}

// nearest is the plan's run with the nearest lease count.
func nearest(p plan, n int) scaleRun {
	best := p.scale[0]
	for _, r := range p.scale {
		if abs(r.leases-n) < abs(best.leases-n) {
			best = r
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
