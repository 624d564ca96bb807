//go:build chaos

package chaos

import (
	"fmt"
	"os"
	"strconv"
	"time"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// runConfig is one run's parameters: the environment picks the seed and the
// length, the rest is fixed so that a seed means the same schedule.
type runConfig struct {
	Seed     int64
	Duration time.Duration
	Leases   []leaseConfig
	// Nodes are the nodes the candidates run on, a lease's pods spread over
	// them.
	Nodes []string
	// Window: see CheckOptions.Window.
	Window time.Duration
	// MinHandoffs, MinAttempts: below them the run explored too little to
	// mean anything, and fails.
	MinHandoffs, MinAttempts int
	// MinBeliefHandoffs, MinReleases: below them the renewal Holder lease
	// was not explored (no holder process's belief passed to another pod,
	// or no grant was released).
	MinBeliefHandoffs, MinReleases int
	// ShardSets are the FencedShardSets of the run, with candidates of
	// their own; MinShardMoves is the fewest shard moves (a shard published
	// to another pod than before) a run must make.
	ShardSets     []shardSetConfig
	MinShardMoves int
}

// shardSetConfig is one FencedShardSet and its candidates: shards "0" to
// Shards-1, each protecting one ConfigMap (shardObject).
type shardSetConfig struct {
	Name     string
	Takeover fencingv1alpha1.TakeoverPolicy
	Duration int32 // leaseDurationSeconds
	// JoinDelay is joinDelaySeconds: short, so that a replacement pod
	// takes shards from the others soon and shards move for balance too.
	JoinDelay int32
	Shards    int32
	Pods      int
}

// leaseConfig is one FencedLease, its candidates and its protected objects.
type leaseConfig struct {
	Name     string
	Takeover fencingv1alpha1.TakeoverPolicy
	Duration int32 // leaseDurationSeconds
	MaxHold  int32 // maxHoldSeconds
	// Renewal is spec.renewal: with Holder the lease's processes follow it
	// with a fence.Session, renew it and release it, instead of reading
	// their pod.
	Renewal fencingv1alpha1.RenewalMode
	Pods    int
	Objects []string
}

// Defaults of a run.
const (
	defaultDuration = 75 * time.Second
	defaultWindow   = time.Second
)

// loadConfig reads CHAOS_SEED, CHAOS_DURATION and CHAOS_WINDOW.
func loadConfig() (runConfig, error) {
	c := runConfig{Seed: time.Now().UnixNano(), Duration: defaultDuration, Window: defaultWindow,
		Nodes: []string{"chaos-node-a", "chaos-node-b", "chaos-node-c"}}
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return c, fmt.Errorf("CHAOS_SEED=%q: %w", s, err)
		}
		c.Seed = seed
	}
	for name, d := range map[string]*time.Duration{"CHAOS_DURATION": &c.Duration, "CHAOS_WINDOW": &c.Window} {
		if s := os.Getenv(name); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil {
				return c, fmt.Errorf("%s=%q: %w", name, s, err)
			}
			*d = v
		}
	}
	// Short leases, so that handoffs are frequent; both takeover modes; one
	// lease rotates its holder on its own (maxHoldSeconds); one is renewed by
	// its holders (renewal Holder, so takeover Safe bounds what the old
	// holder believes too).
	c.Leases = []leaseConfig{
		{Name: "l0", Takeover: fencingv1alpha1.TakeoverSafe, Duration: 2, MaxHold: 8, Pods: 3},
		{Name: "l1", Takeover: fencingv1alpha1.TakeoverImmediate, Duration: 2, MaxHold: 6, Pods: 3},
		{Name: "l2", Takeover: fencingv1alpha1.TakeoverImmediate, Duration: 3, Pods: 3},
		{Name: "l3", Takeover: fencingv1alpha1.TakeoverSafe, Duration: 3, Renewal: fencingv1alpha1.RenewalHolder, Pods: 3},
	}
	for i := range c.Leases {
		l := &c.Leases[i]
		l.Objects = []string{l.Name + "-a", l.Name + "-b"}
	}
	c.MinHandoffs = max(8, int(c.Duration/(8*time.Second)))
	c.MinAttempts = max(100, int(c.Duration/time.Second)*2)
	c.MinBeliefHandoffs, c.MinReleases = 1, 1
	// Two shard sets, one per takeover policy, with short leases and join
	// delays so that shards move often.
	c.ShardSets = []shardSetConfig{
		{Name: "ss-safe", Takeover: fencingv1alpha1.TakeoverSafe, Duration: 2, JoinDelay: 3, Shards: 6, Pods: 3},
		{Name: "ss-imm", Takeover: fencingv1alpha1.TakeoverImmediate, Duration: 2, JoinDelay: 3, Shards: 8, Pods: 3},
	}
	c.MinShardMoves = max(4, int(c.Duration/(10*time.Second)))
	return c, nil
}
