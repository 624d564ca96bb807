package shard

import (
	"cmp"
	"slices"
	"time"
)

// Pod is an eligible candidate of a shard set, as the assignment sees it.
type Pod struct {
	// Name identifies the pod; it breaks every tie, so that two replicas
	// of the operator plan the same assignment from the same inputs.
	Name string
	// Since is when the pod became eligible. Shards without a live owner
	// go to the youngest pods with room first, so that during a rolling
	// update a shard lands on a pod of the new revision and does not move
	// again; and a pod younger than Input.JoinDelay is given no shard
	// taken from a live owner.
	Since time.Time
}

// Input is everything the assignment depends on.
type Input struct {
	// Shards are the keys of the set.
	Shards []string
	// Owners maps a shard to its current owner. An owner that is not
	// among Pods (deleted, not ready, not matching) has lost its shards:
	// they are placed again without taking any from a live owner.
	Owners map[string]string
	// Acquired maps a shard to when its current owner was granted it (its
	// Lease's acquireTime), and Transitions to how often it has changed
	// hands (leaseTransitions). An owner above its quota gives up its most
	// recently acquired shards first, among equals those that moved least:
	// in a rolling update without surge, the shards of a pod that left are
	// spread over the others and then handed on to its replacement, while
	// the others' own shards stay put (docs/shards.md).
	Transitions map[string]int32
	Acquired    map[string]time.Time
	// Pods are the eligible pods.
	Pods []Pod
	// Now is the time of the decision.
	Now time.Time
	// JoinDelay is how long a newly eligible pod waits before shards are
	// taken from live owners for it. Shards that have no live owner are
	// given to it at once. During a rolling update, the pod that replaces
	// another thus receives the shards of the one it replaces, instead of
	// a share of everyone's first and the leaver's shards spread over the
	// old pods (which would move them again when those are replaced).
	JoinDelay time.Duration
	// MaxMoves caps the shards taken from live owners in one plan, so that
	// a rebalance is paced; 0 means no cap. Shards without a live owner
	// are always placed.
	MaxMoves int
}

// Move is one shard changing hands. From is empty for a shard that had no
// live owner; To is empty when no pod is eligible.
type Move struct {
	Shard, From, To string
}

// Plan is the assignment Assign decides.
type Plan struct {
	// Owners maps every shard to its owner after the moves ("" when no pod
	// is eligible).
	Owners map[string]string
	// Moves are the shards that change hands, in the order of Input.Shards.
	Moves []Move
	// Taken counts the moves that take a shard from a live owner (the
	// movement the bound in docs/shards.md is about).
	Taken int
	// Wait, when not zero, is when a pod that is now too young to be given
	// shards from live owners comes of age while the set is out of
	// balance: plan again then.
	Wait time.Time
	// Paced is true when MaxMoves stopped the plan short of balance: plan
	// again after the pace interval.
	Paced bool
}

// Assign decides the owner of every shard. Every eligible pod ends with
// ⌊n/p⌋ or ⌈n/p⌉ shards once no pod is younger than JoinDelay and MaxMoves
// does not cap; a shard whose owner is eligible stays with it unless that
// owner holds more than its quota; the ⌈n/p⌉ quotas go to the pods that
// keep the most, so that the shards taken from live owners, Σ max(0,
// kept − quota), are the fewest any balanced assignment takes.
func Assign(in Input) Plan {
	pods := slices.Clone(in.Pods)
	slices.SortFunc(pods, func(a, b Pod) int { return cmp.Compare(a.Name, b.Name) })
	pods = slices.CompactFunc(pods, func(a, b Pod) bool { return a.Name == b.Name })
	owned := map[string][]string{} // pod → its kept shards, in Shards order
	var free []string              // shards with no live owner, in Shards order
	live := map[string]bool{}
	for _, p := range pods {
		live[p.Name] = true
	}
	for _, s := range in.Shards {
		if o := in.Owners[s]; live[o] {
			owned[o] = append(owned[o], s)
		} else {
			free = append(free, s)
		}
	}
	plan := Plan{Owners: make(map[string]string, len(in.Shards))}
	if len(pods) == 0 {
		for _, s := range free {
			plan.Owners[s] = ""
			if o := in.Owners[s]; o != "" {
				plan.Moves = append(plan.Moves, Move{Shard: s, From: o})
			}
		}
		return plan
	}
	for _, ss := range owned {
		// The order in which an owner gives shards up: the last first.
		slices.SortStableFunc(ss, func(a, b string) int {
			if c := in.Acquired[a].Compare(in.Acquired[b]); c != 0 {
				return c
			}
			return cmp.Compare(in.Transitions[b], in.Transitions[a])
		})
	}
	quota := quotas(pods, owned, len(in.Shards))
	settled := func(p Pod) bool { return !in.Now.Before(p.Since.Add(in.JoinDelay)) }

	// Room: how many each pod may still take, youngest first.
	byAge := slices.Clone(pods)
	slices.SortStableFunc(byAge, func(a, b Pod) int { return b.Since.Compare(a.Since) })
	to := map[string]string{}
	for _, p := range byAge {
		for len(free) > 0 && len(owned[p.Name]) < quota[p.Name] {
			s := free[0]
			free = free[1:]
			owned[p.Name] = append(owned[p.Name], s)
			to[s] = p.Name
		}
	}

	// Shards taken from live owners above their quota, for settled pods
	// below theirs: the oldest owners give first, the shards that moved
	// least first.
	budget := in.MaxMoves
	byAgeOld := slices.Clone(byAge)
	slices.Reverse(byAgeOld)
	for _, p := range byAge {
		need := quota[p.Name] - len(owned[p.Name])
		if need <= 0 {
			continue
		}
		if !settled(p) {
			if w := p.Since.Add(in.JoinDelay); plan.Wait.IsZero() || w.Before(plan.Wait) {
				plan.Wait = w
			}
			continue
		}
		for _, giver := range byAgeOld {
			for need > 0 && len(owned[giver.Name]) > quota[giver.Name] {
				if in.MaxMoves > 0 && budget == 0 {
					plan.Paced = true
					break
				}
				g := owned[giver.Name]
				s := g[len(g)-1]
				owned[giver.Name] = g[:len(g)-1]
				owned[p.Name] = append(owned[p.Name], s)
				to[s] = p.Name
				need--
				budget--
				plan.Taken++
			}
		}
	}
	for p, ss := range owned {
		for _, s := range ss {
			plan.Owners[s] = p
		}
	}
	for _, s := range in.Shards {
		if t, ok := to[s]; ok {
			plan.Moves = append(plan.Moves, Move{Shard: s, From: in.Owners[s], To: t})
		}
	}
	return plan
}

// quotas gives each pod ⌊n/p⌋ shards, and one more to the n mod p pods
// that keep the most (ties: the younger, then the name), so that the fewest
// shards are taken from live owners.
func quotas(pods []Pod, owned map[string][]string, n int) map[string]int {
	base, extra := n/len(pods), n%len(pods)
	order := slices.Clone(pods)
	slices.SortStableFunc(order, func(a, b Pod) int {
		if c := cmp.Compare(len(owned[b.Name]), len(owned[a.Name])); c != 0 {
			return c
		}
		if c := b.Since.Compare(a.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	q := make(map[string]int, len(pods))
	for i, p := range order {
		q[p.Name] = base
		if i < extra {
			q[p.Name]++
		}
	}
	return q
}
