//go:build bench

package bench_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.ControlPlane))
	}
	klog.SetLogger(logr.Discard()) // client-go's leader election logs every attempt
	testenv.Main(m, &env)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// Sample is one handoff, in milliseconds from its cause.
type Sample struct {
	// Published: the new holder is published (fencedlease: the
	// FencedLease's status and the pod's annotations name it with the new
	// fence; client-go: the Lease's holderIdentity names it).
	Published float64 `json:"published_ms"`
	// Knows: the new holder's process knows (fencedlease: its pkg/fence
	// Watcher reports holder with the new fence; client-go:
	// OnStartedLeading).
	Knows float64 `json:"knows_ms"`
	// AfterRenewal: the new holder published, measured from the old
	// holder's last renewal (the Lease's renewTime of the old grant).
	AfterRenewal float64 `json:"after_renewal_ms"`
	// Group and Seq: which group, and which of its handoffs (from 0).
	Group int `json:"group"`
	Seq   int `json:"seq"`
}

// Series is every handoff of one configuration and cause.
type Series struct {
	System  string   `json:"system"`
	Config  string   `json:"config"`
	Cause   string   `json:"cause"`
	Timing  string   `json:"timing"`
	Samples []Sample `json:"samples"`
}

// Result is what TestFailover writes to $BENCH_OUT.
type Result struct {
	Handoffs  int      `json:"handoffs"`
	Groups    int      `json:"groups"`
	NodeGrace string   `json:"node_grace"`
	Series    []Series `json:"series"`
	// CASProbe is the Lease compare-and-swap and watch delivery measured
	// beside the handoffs (probeCAS).
	CASProbe CASProbe `json:"cas_probe"`
	// Steps is where the operator's grant reconciles spent their time.
	Steps Steps `json:"steps"`
}

func writeResult(t *testing.T, r Result) { testenv.WriteResult(t, "BENCH_OUT", r) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
