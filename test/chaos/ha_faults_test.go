//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencedlease/fencedlease/test/cluster"
)

// Fault kinds of the HA control plane (CHAOS_CONTROL_PLANE=ha), injected
// beside the run's own.
const (
	// faultAPIServerRestart stops an API server (SIGTERM, or SIGKILL as a
	// crash), keeps it down a while and starts it again: its clients'
	// connections end, those through the balancer reconnect to the other
	// server, those pinned to it fail until it is back; every watch cache
	// of the restarted server starts anew, and the informers re-list.
	faultAPIServerRestart = "apiserver-restart"
	// faultAPIServerCut cuts the network to an API server for a while: the
	// connections to it end and new ones are refused (the balancer sends
	// them to the other server); the server itself runs on.
	faultAPIServerCut = "apiserver-cut"
	// faultEtcdRestart kills an etcd member (often the leader), keeps it
	// down a while and starts it again on its data: the other two keep a
	// quorum, elect a leader if needed, and the member catches up.
	faultEtcdRestart = "etcd-member-restart"
	// faultEtcdLeaderMove moves the etcd leadership to another member
	// (etcdctl move-leader).
	faultEtcdLeaderMove = "etcd-leader-move"
)

// haFaults are the HA faults, in two sequences that run side by side: the
// API servers' (one API server faulty at a time) and etcd's (one member
// down at a time, or the leader moved), so that the control plane as a
// whole stays available. In each sequence every kind comes once first (in
// an order drawn from the seed), then kinds are drawn by weight.
var haFaults = [][]struct {
	name   string
	weight int
}{
	{{faultAPIServerRestart, 1}, {faultAPIServerCut, 1}},
	{{faultEtcdRestart, 1}, {faultEtcdLeaderMove, 1}},
}

func haFaultKinds() []string {
	var out []string
	for _, seq := range haFaults {
		for _, f := range seq {
			out = append(out, f.name)
		}
	}
	return out
}

// haInjector injects the HA faults.
type haInjector struct {
	c           *cluster.Cluster
	mu          sync.Mutex
	refused     int
	lastRefusal string
}

func newHAInjector(c *cluster.Cluster) *haInjector { return &haInjector{c: c} }

// run injects the two sequences of faults, each from a PRNG of the run's
// seed, until the deadline; each fault ends healed (both API servers up and
// reachable, all three members up), so when run returns all have healed.
func (in *haInjector) run(ctx context.Context, w *world, until time.Time) error {
	errs := make([]error, len(haFaults))
	var wg sync.WaitGroup
	for i := range haFaults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.sequence(ctx, w, rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(3+i))), i, until)
		}()
	}
	wg.Wait()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.refused > 0 {
		w.rec.Fault("etcd-leader-move-refused", fmt.Sprintf("%d times, last: %s", in.refused, in.lastRefusal))
	}
	return errors.Join(errs...)
}

// sequence injects the faults of haFaults[seq], one after the other, with a
// pause of 1–5 s between two.
func (in *haInjector) sequence(ctx context.Context, w *world, rng *rand.Rand, seq int, until time.Time) error {
	kinds := haFaults[seq]
	order := rng.Perm(len(kinds))
	total := 0
	for _, f := range kinds {
		total += f.weight
	}
	for i := 0; time.Now().Before(until) && ctx.Err() == nil; i++ {
		var kind string
		if i < len(order) {
			kind = kinds[order[i]].name
		} else {
			n := rng.IntN(total)
			for _, f := range kinds {
				if n -= f.weight; n < 0 {
					kind = f.name
					break
				}
			}
		}
		if err := in.plan(w, rng, kind)(ctx); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		sleep(ctx, between(rng, time.Second, 5*time.Second))
	}
	return nil
}

// plan draws a fault's parameters and returns it.
func (in *haInjector) plan(w *world, rng *rand.Rand, kind string) func(context.Context) error {
	server, crash := rng.IntN(in.c.APIServers()), rng.IntN(2) == 0
	down, cut := between(rng, 500*time.Millisecond, 4*time.Second), between(rng, time.Second, 8*time.Second)
	member, atLeader, to := rng.IntN(in.c.EtcdMembers()), rng.Float64() < 0.5, rng.IntN(in.c.EtcdMembers()-1)
	switch kind {
	case faultAPIServerRestart:
		return func(ctx context.Context) error { return in.restartAPIServer(ctx, w, server, crash, down) }
	case faultAPIServerCut:
		return func(ctx context.Context) error { return in.cutAPIServer(ctx, w, server, cut) }
	case faultEtcdRestart:
		return func(ctx context.Context) error { return in.restartMember(ctx, w, member, atLeader, down) }
	case faultEtcdLeaderMove:
		return func(ctx context.Context) error { return in.moveLeader(ctx, w, to) }
	}
	panic("unknown HA fault " + kind)
}

// restartAPIServer stops API server i (a crash or a graceful stop), keeps it
// down for down, starts it again and waits until it is ready. Meanwhile the
// balancer and its proxy keep it cut off, as a load balancer does with an
// API server that fails its readiness check: clients meet a refused
// connection, not a server that is still starting.
func (in *haInjector) restartAPIServer(ctx context.Context, w *world, i int, crash bool, down time.Duration) error {
	how := "stopped"
	if crash {
		how = "crashed"
	}
	w.rec.Fault(faultAPIServerRestart, fmt.Sprintf("kube-apiserver-%d %s, down %s", i, how, down))
	if err := in.c.StopAPIServer(i, crash); err != nil {
		return err
	}
	if err := in.c.CutAPIServer(i); err != nil {
		return err
	}
	sleep(ctx, down)
	if err := in.c.StartAPIServer(context.WithoutCancel(ctx), i); err != nil {
		return err
	}
	return in.c.HealAPIServer(i)
}

// cutAPIServer cuts the network to API server i for d.
func (in *haInjector) cutAPIServer(ctx context.Context, w *world, i int, d time.Duration) error {
	w.rec.Fault(faultAPIServerCut, fmt.Sprintf("kube-apiserver-%d for %s", i, d))
	if err := in.c.CutAPIServer(i); err != nil {
		return err
	}
	sleep(ctx, d)
	return in.c.HealAPIServer(i)
}

// restartMember kills an etcd member (the leader, when atLeader and one
// leads), keeps it down for down and starts it again.
func (in *haInjector) restartMember(ctx context.Context, w *world, member int, atLeader bool, down time.Duration) error {
	what := ""
	if atLeader {
		if l, _, err := in.c.EtcdLeader(ctx); err == nil {
			member, what = l, " (the leader)"
		}
	}
	w.rec.Fault(faultEtcdRestart, fmt.Sprintf("etcd-%d%s killed, down %s", member, what, down))
	if err := in.c.KillEtcdMember(member); err != nil {
		return err
	}
	sleep(ctx, down)
	return in.c.StartEtcdMember(context.WithoutCancel(ctx), member)
}

// moveLeader hands the etcd leadership to the to-th of the other members
// that run. etcd may refuse a move (a member still catching up, an
// election under way): it is tried again a few times, and a refusal is
// counted apart, not as a move.
func (in *haInjector) moveLeader(ctx context.Context, w *world, to int) error {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		leader, st, err := in.c.EtcdLeader(ctx)
		if err == nil {
			var others []int
			for _, s := range st {
				if s.Index != leader {
					others = append(others, s.Index)
				}
			}
			if len(others) > 0 {
				target := others[to%len(others)]
				if _, err = in.c.MoveEtcdLeader(ctx, target); err == nil {
					w.rec.Fault(faultEtcdLeaderMove, fmt.Sprintf("etcd-%d to etcd-%d", leader, target))
					return nil
				}
			} else {
				err = fmt.Errorf("no other member answers")
			}
		}
		last = err
		sleep(ctx, time.Second)
	}
	in.mu.Lock()
	in.refused++
	in.lastRefusal = last.Error()
	in.mu.Unlock()
	return nil
}
