package sim_test

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencedlease/fencedlease/controllers/fencedshardset"
	"github.com/fencedlease/fencedlease/internal/sim"
)

// shardReconciler builds the real FencedShardSet controller on the
// simulated clients. It writes one shard's Lease at a time (Writers 1): its
// writers are goroutines of their own, and one at a time they make their
// calls in an order the schedule alone decides.
func shardReconciler(c sim.Clients) sim.Reconciler {
	return &fencedshardset.Reconciler{Client: c.Client, APIReader: c.APIReader, Recorder: noEvents{}, Clock: c.Clock, Writers: 1}
}

// shardConfig is the run of a seed with shard sets: two or three
// replicas, one set or two, their takeover chosen per set by the seed;
// two seeds in three also resize the sets, switch their takeover and
// delete and create them again.
func shardConfig(seed int64) sim.Config {
	cfg := shardBaseConfig(seed)
	cfg.Shards.SpecChanges = seed%3 != 0
	return cfg
}

// shardBaseConfig is shardConfig without changes to the sets' specs: the
// schedules as the regression seeds were found.
func shardBaseConfig(seed int64) sim.Config {
	return sim.Config{
		Seed:               seed,
		Steps:              envInt("SIM_STEPS", 1000),
		Replicas:           2 + int(seed%2),
		LostReplies:        0.05,
		LostRequests:       0.02,
		Crashes:            0.001,
		PodsBehind:         0.25,
		PausesBeforeWrites: 0.01,
		World:              sim.WorldConfig{ChangeWeight: []int{1, 3, 8}[seed%3]},
		Shards:             &sim.ShardsConfig{Sets: 1 + int(seed/2%2), Pods: 3},
		Settle:             true,
	}
}

// shardSeeds is how many schedules a plain go test runs with shard sets
// (a tenth of TestSimulation's, each one longer);
// SIM_SEEDS runs more (or fewer), SIM_SEED replays one.
const shardSeeds = 100

// TestSimulationShards runs seeded schedules of two or three replicas of
// the FencedShardSet controller, with lagging caches, lost replies, pauses
// before writes, crashes, and pods that join, leave, flap and lose their
// nodes, and checks every shard's invariants after every write, then that
// every set settles: owned, published to its owners, balanced.
func TestSimulationShards(t *testing.T) {
	seeds := shardSeeds
	if testing.Short() {
		seeds = 50
	}
	first, n := int64(envInt("SIM_SEED", envInt("SIM_FIRST", 1))), envInt("SIM_SEEDS", seeds)
	if os.Getenv("SIM_SEED") != "" {
		n = 1
	}
	results := make([]sim.Result, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				results[i] = sim.Run(shardConfig(first+int64(i)), nil, shardReconciler)
			}
		})
	}
	wg.Wait()
	var total sim.Stats
	for _, res := range results {
		total = add(total, res.Stats)
		total.ShardGrants += res.Stats.ShardGrants
		total.ShardRevocations += res.Stats.ShardRevocations
		total.ShardPublications += res.Stats.ShardPublications
		if len(res.Violations) > 0 {
			cfg := shardConfig(res.Seed)
			cfg.Trace = true
			replay := sim.Run(cfg, nil, shardReconciler)
			if f := os.Getenv("SIM_TRACE_FILE"); f != "" {
				_ = os.WriteFile(f, []byte(strings.Join(replay.Trace, "\n")), 0o644)
			}
			t.Fatalf("seed %d broke an invariant of the shards: %s\n\nreplay with SIM_SEED=%d; the last steps of the run:\n%s",
				res.Seed, strings.Join(res.Violations, "\n"), res.Seed, tail(replay.Trace, 80))
		}
	}
	t.Logf("%d schedules with shard sets, seeds %d to %d: %+v", n, first, first+int64(n)-1, total)
	if os.Getenv("SIM_SEED") != "" || n < coverageSeeds {
		return
	}
	// A simulation that never moves a shard, never revokes, never
	// publishes, never loses a reply or never settles proves nothing.
	if total.ShardGrants < n || total.ShardRevocations == 0 || total.ShardPublications < n || total.LostReplies == 0 ||
		total.Conflicts == 0 || total.Settled < n || total.PausesBeforeWrites == 0 || total.PodsBehind == 0 {
		t.Fatalf("the schedules with shard sets explored too little: %+v", total)
	}
}

// shardRegressionSeeds are schedules with shard sets that once broke an
// invariant, run by every go test whatever the range of seeds: 5, a
// replica that counted the Safe wait of a revocation it first saw in its
// Lease list from the start of its reconcile, before the revocation was
// applied, and committed the shard to a new pod 9.2 s after it (lease
// 10 s); 38, a replica whose pod cache lagged read a pod to mark live and
// took from it a shard granted after its Lease list, whose fence a later
// reconcile published to it again; 475 (Immediate), a shard moved from p7
// to p10 whose mark of p7 failed, then from p10 to p12: the Lease named
// only p10 as previous holder, so p7 was never marked, and a paused
// replica's publication of the first grant to p7 landed beside p12's.
var shardRegressionSeeds = []int64{5, 38, 475}

// TestSimulationShardsRegressionSeeds replays them: each must now keep
// every invariant.
func TestSimulationShardsRegressionSeeds(t *testing.T) {
	for _, seed := range shardRegressionSeeds {
		if res := sim.Run(shardBaseConfig(seed), nil, shardReconciler); len(res.Violations) > 0 {
			t.Errorf("seed %d broke an invariant of the shards again: %s (replay with SIM_SEED=%d)", seed, strings.Join(res.Violations, "\n"), seed)
		}
	}
}
