package sim_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/sim"
	"github.com/fencedlease/fencedlease/internal/webhook/protected"
)

// reconciler builds the real controller on the simulated clients, with the
// command's defaults but its heartbeat: each grant renewed on its own Lease.
func reconciler(c sim.Clients) sim.Reconciler {
	return &fencedlease.Reconciler{
		Client:                c.Client,
		APIReader:             c.APIReader,
		Clock:                 c.Clock,
		Concurrently:          c.Concurrently,
		PendingGrace:          fencedlease.DefaultPendingGrace,
		StatusRenewalInterval: fencedlease.DefaultStatusRenewalInterval,
	}
}

// vouching builds the real controller as the command runs it, with its
// heartbeat vouching for the grants of renewal Operator; its refresh is
// short, so that a run sees refreshes too.
func vouching(c sim.Clients) sim.Reconciler {
	r := reconciler(c).(*fencedlease.Reconciler)
	r.Heartbeat = &fencedlease.Heartbeat{Namespace: "fencedlease-system", Name: fencedlease.DefaultHeartbeatName,
		Interval: fencedlease.DefaultHeartbeatInterval, Refresh: 20 * time.Second, Identity: "replica"}
	return r
}

// reconcilerFor is the controller a seed runs: three seeds in four with
// the heartbeat, the fourth without.
func reconcilerFor(seed int64) sim.NewReconciler {
	if seed%4 == 0 {
		return reconciler
	}
	return vouching
}

// webhook builds the fencing webhook's real handler on a replica's cache
// and live reader.
func webhook(c sim.WebhookClients) admission.Handler {
	return protected.NewHandler(protected.Options{Cache: c.Cache, APIReader: c.APIReader, Resources: listed}, noEvents{})
}

// listed is the configuration the simulated webhook decides writes of, as
// the installs render it: ConfigMaps and Secrets with all their
// subresources (the simulation sends status writes of ConfigMaps).
var listed = staticResources(coverage.Listed(&admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{
	{Rules: coverage.Rules([]coverage.Entry{{Resources: []string{"configmaps", "secrets"}}})}}}))

type staticResources []coverage.Resource

func (r staticResources) Listed(context.Context) []coverage.Resource { return r }

// noEvents records nothing.
type noEvents struct{}

func (noEvents) Eventf(k8sruntime.Object, k8sruntime.Object, string, string, string, string, ...any) {
}

func indexes() []sim.Index {
	var out []sim.Index
	for _, ix := range fencedlease.Indexes() {
		out = append(out, sim.Index{Object: ix.Object, Field: ix.Field, Extract: ix.Extract})
	}
	return out
}

// envInt reads a knob of the simulation from the environment: SIM_SEEDS
// runs more schedules, SIM_FIRST starts them at another seed, SIM_SEED
// replays one.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func config(seed int64) sim.Config {
	return sim.Config{
		Seed:         seed,
		Steps:        envInt("SIM_STEPS", 1000),
		Replicas:     2 + int(seed%2),
		LostReplies:  0.05,
		LostRequests: 0.02,
		Crashes:      0.001,
		// A replica now and then starts before its pod cache has every
		// pod: the first grant of a pod another replica does not see.
		PodsBehind: 0.25,
		// Now and then a replica stalls right before a write.
		PausesBeforeWrites: 0.01,
		// Calm, busy and stormy worlds, in turn.
		World: sim.WorldConfig{ChangeWeight: []int{1, 3, 8}[seed%3]},
		// One or two webhook replicas, each with a cache of its own.
		Webhooks:   1 + int(seed/2%2),
		NewWebhook: webhook,
		Settle:     true,
	}
}

// coverageSeeds is how many schedules a run needs before it is asked to
// have explored enough (go test -short runs as many): fewer seeds cannot
// be expected to meet every one of TestSimulation's thresholds.
const coverageSeeds = 50

// TestSimulation runs many seeded schedules of two or three operator
// replicas against the simulated API server with lagging caches, lost
// replies, pauses, crashes and a changing world, and checks the invariants
// after every write. A failure prints the seed and the trace of its run;
// SIM_SEED=<seed> replays it.
func TestSimulation(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		// go test -short runs a sample; make test runs the thousand.
		seeds = 50
	}
	first, n := int64(envInt("SIM_SEED", envInt("SIM_FIRST", 1))), envInt("SIM_SEEDS", seeds)
	if os.Getenv("SIM_SEED") != "" {
		n = 1
	}
	// Seeds are independent runs: spread them over the cores, and report the
	// lowest failing seed.
	results := make([]sim.Result, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				results[i] = sim.Run(config(first+int64(i)), indexes(), reconcilerFor(first+int64(i)))
			}
		}()
	}
	wg.Wait()
	var total sim.Stats
	for _, res := range results {
		seed := res.Seed
		total = add(total, res.Stats)
		if len(res.Violations) > 0 {
			cfg := config(seed)
			cfg.Trace = true
			replay := sim.Run(cfg, indexes(), reconcilerFor(seed))
			if f := os.Getenv("SIM_TRACE_FILE"); f != "" {
				_ = os.WriteFile(f, []byte(strings.Join(replay.Trace, "\n")), 0o644)
			}
			t.Fatalf("seed %d broke an invariant: %s\n\nreplay with SIM_SEED=%d; the last steps of the run:\n%s",
				seed, strings.Join(res.Violations, "\n"), seed, tail(replay.Trace, 80))
		}
	}
	if os.Getenv("SIM_SEED") != "" {
		// A replay of one seed reproduces that seed; what a whole run must
		// explore is not asked of it.
		t.Logf("replayed seed %d: %+v", first, total)
		return
	}
	t.Logf("%d schedules, seeds %d to %d: %+v", n, first, first+int64(n)-1, total)
	if n < coverageSeeds {
		t.Logf("%d schedules are too few to be asked what a run must explore (%d at least)", n, coverageSeeds)
		return
	}
	// A simulation that never grants or publishes, never decides a stale
	// write, or never settles proves nothing.
	if total.Grants < n || total.Publishes < n/2 || total.LostReplies == 0 && total.Conflicts == 0 ||
		total.WebhookDecisions < n || total.WebhookDenials == 0 || total.LaggingCacheDecisions == 0 || total.StaleDeletes == 0 ||
		total.ImpostorWrites == 0 || total.ProtectedWrites < n || total.Settled < n || total.Heartbeats < n || total.Overtaken == 0 || total.PodsBehind == 0 ||
		total.PausesBeforeWrites == 0 || total.MetadataChangingWrites == 0 {
		t.Fatalf("the schedules explored too little: %+v", total)
	}
}

// regressionSeeds are schedules that once broke an invariant, run by every
// go test whatever the range of seeds: 1275 (of 4,000), a replica that
// ended the Safe wait counting the old grant's lease from its pending write,
// not from its commit 3.7 s later, which the writing replica had counted;
// 2685, a replica that saw a grant pending and next revoked with the same
// renewTime, and never counted its commit, applied 3.1 s after it was
// computed (a write in flight), from which the holder could act; 3160, a
// pod relabelled from one FencedLease to another and back, made the second
// one's standby while the first one's grant held it, and published the
// first one's fence again; 153, a publication that took the Lease read
// beside its list for a confirmation, although the list showed the holder
// demoted by a revocation of the very grant, and published it again. They
// were found before Config.PodsBehind and Config.PausesBeforeWrites, and
// run without them, as found.
var regressionSeeds = []int64{153, 1275, 2685, 3160}

// laterRegressionSeeds were found with the configuration of config: 3557
// (of 4,000), a pod still published as the holder of FencedLease db, whose
// grant had ended, granted by FencedLease other, which wrote its label
// alone over db's: db's deletion found its pods by the label and never
// cleared it, and once db was created again the pod stayed published as
// its holder beside the holder of the new db's grant.
var laterRegressionSeeds = []int64{3557}

// TestSimulationRegressionSeeds replays the schedules that once broke an
// invariant: each must now keep every one.
func TestSimulationRegressionSeeds(t *testing.T) {
	run := func(seed int64, cfg sim.Config) {
		if res := sim.Run(cfg, indexes(), reconcilerFor(seed)); len(res.Violations) > 0 {
			t.Errorf("seed %d broke an invariant again: %s (replay with SIM_SEED=%d)", seed, strings.Join(res.Violations, "\n"), seed)
		}
	}
	for _, seed := range regressionSeeds {
		cfg := config(seed)
		cfg.PodsBehind, cfg.PausesBeforeWrites = 0, 0 // as they were found
		run(seed, cfg)
	}
	for _, seed := range laterRegressionSeeds {
		run(seed, config(seed))
	}
}

func add(a, b sim.Stats) sim.Stats {
	a.Reconciles += b.Reconciles
	a.Calls += b.Calls
	a.Writes += b.Writes
	a.Conflicts += b.Conflicts
	a.LostReplies += b.LostReplies
	a.Grants += b.Grants
	a.Publishes += b.Publishes
	a.Crashes += b.Crashes
	a.WorldChanges += b.WorldChanges
	a.WebhookDecisions += b.WebhookDecisions
	a.WebhookDenials += b.WebhookDenials
	a.LaggingCacheDecisions += b.LaggingCacheDecisions
	a.ProtectedWrites += b.ProtectedWrites
	a.StaleDeletes += b.StaleDeletes
	a.ImpostorWrites += b.ImpostorWrites
	a.StatusWrites += b.StatusWrites
	a.MetadataChangingWrites += b.MetadataChangingWrites
	a.PolicyDenials += b.PolicyDenials
	a.Settled += b.Settled
	a.PodsBehind += b.PodsBehind
	a.Heartbeats += b.Heartbeats
	a.Forks += b.Forks
	a.Overtaken += b.Overtaken
	a.PausesBeforeWrites += b.PausesBeforeWrites
	return a
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestTraceOne writes the trace of one seed to SIM_TRACE_FILE (for people
// studying a schedule; it asserts nothing more than TestSimulation).
func TestTraceOne(t *testing.T) {
	f := os.Getenv("SIM_TRACE_FILE")
	if f == "" || os.Getenv("SIM_SEED") == "" {
		t.Skip("set SIM_SEED and SIM_TRACE_FILE to write the trace of one seed")
	}
	seed := int64(envInt("SIM_SEED", 1))
	cfg := config(seed)
	cfg.Trace = true
	res := sim.Run(cfg, indexes(), reconcilerFor(seed))
	if err := os.WriteFile(f, []byte(strings.Join(res.Trace, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res.Stats)
}
