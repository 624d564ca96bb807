//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// Fault kinds.
const (
	faultPodDelete   = "pod-delete"
	faultNotReady    = "containers-not-ready"
	faultNodeLost    = "node-lost"
	faultCrash       = "operator-crash"
	faultSecond      = "second-replica"
	faultLostReplies = "lost-replies"
	faultReadLag     = "read-lag"
	faultLeaseDelete = "lease-delete"
	faultWebhookLag  = "webhook-read-lag"
	faultRecreate    = "fencedlease-recreate"
)

// The steps of the recreate fault, logged beside it: each delete and each
// create, with the FencedLease's UID.
const (
	faultRecreateDelete = faultRecreate + ":delete"
	faultRecreateCreate = faultRecreate + ":create"
)

// faultKinds in the order of the first round (shuffled by the seed), with
// their weights afterwards: faults at the pods are the most frequent, as they
// cause the handoffs.
var faultKinds = []struct {
	name   string
	weight int
}{
	{faultPodDelete, 4}, {faultNotReady, 4}, {faultNodeLost, 2}, {faultCrash, 1},
	{faultSecond, 1}, {faultLostReplies, 2}, {faultReadLag, 2}, {faultLeaseDelete, 1},
	{faultWebhookLag, 2}, {faultRecreate, 1},
}

// shardFaultChance is the share of the faults at pods (deleted, not
// ready, their node lost) that hit a shard set's candidate.
const shardFaultChance = 0.4

// injector draws faults from the seeded PRNG until the deadline. Every
// choice (kind, target, durations, gaps) is the PRNG's; what the fault hits
// depends on the state it finds (which pod holds a lease now), so a seed
// replays the schedule, not the exact interleaving.
type injector struct {
	w   *world
	ops *operators
	rng *rand.Rand
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func newInjector(w *world, ops *operators) *injector {
	return &injector{w: w, ops: ops, rng: rand.New(rand.NewPCG(uint64(w.cfg.Seed), 1))}
}

// between returns a duration in [lo, hi) from the PRNG.
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// run injects faults until the deadline, then waits until every fault has
// healed: nodes back, pods ready, the operator running alone and reliably.
// Each fault runs in its own goroutine, so that faults overlap.
func (in *injector) run(ctx context.Context, until time.Time) error {
	order := in.rng.Perm(len(faultKinds))
	total := 0
	for _, k := range faultKinds {
		total += k.weight
	}
	for i := 0; time.Now().Before(until) && ctx.Err() == nil; i++ {
		var kind string
		if i < len(order) {
			kind = faultKinds[order[i]].name
		} else {
			n := in.rng.IntN(total)
			for _, k := range faultKinds {
				if n -= k.weight; n < 0 {
					kind = k.name
					break
				}
			}
		}
		// Every draw happens here, in order, so that the schedule is a
		// function of the seed; the fault then runs on its own.
		f := in.plan(kind)
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			if err := f(ctx); err != nil {
				in.mu.Lock()
				in.err = fmt.Errorf("%s: %w", kind, err)
				in.mu.Unlock()
			}
		}()
		sleep(ctx, between(in.rng, 300*time.Millisecond, 3*time.Second))
	}
	in.wg.Wait()
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

// plan draws the parameters of a fault and returns it.
func (in *injector) plan(kind string) func(context.Context) error {
	w, rng := in.w, in.rng
	l := w.leases[rng.IntN(len(w.leases))]
	slotIndex, atHolder := rng.IntN(len(l.slots)), rng.Float64() < 0.6
	target := func() *slot {
		if atHolder {
			if s := w.holderSlot(l); s != nil {
				return s
			}
		}
		return l.slots[slotIndex]
	}
	a, b := between(rng, 500*time.Millisecond, 3*time.Second), between(rng, time.Second, 6*time.Second)
	nodeIndex := rng.IntN(len(w.cfg.Nodes))
	replacement := rng.Uint64()
	kindIndex, onSecondary := rng.IntN(len(lagKinds)), rng.IntN(2) == 0
	// A fault at a pod hits a shard set's candidate instead with
	// shardFaultChance (its node, for a lost node).
	onShards := rng.Float64() < shardFaultChance && len(w.shardSets) > 0
	var ss *shardSet
	var shardSlot *slot
	if len(w.shardSets) > 0 {
		ss = w.shardSets[rng.IntN(len(w.shardSets))]
		shardSlot = ss.slots[rng.IntN(len(ss.slots))]
	}
	switch kind {
	case faultPodDelete:
		if onShards {
			return func(ctx context.Context) error {
				return in.deletePod(ctx, shardSlot, a, replacement, func(node string) error { return w.replaceShardPod(ss, shardSlot, node) })
			}
		}
		return func(ctx context.Context) error {
			s := target()
			return in.deletePod(ctx, s, a, replacement, func(node string) error { return w.replace(l, s, node) })
		}
	case faultNotReady:
		if onShards {
			return func(ctx context.Context) error { return in.notReady(ctx, shardSlot, b) }
		}
		return func(ctx context.Context) error { return in.notReady(ctx, target(), b) }
	case faultNodeLost:
		return func(ctx context.Context) error {
			node := w.cfg.Nodes[nodeIndex]
			switch {
			case onShards:
				node = w.pod(shardSlot).Spec.NodeName
			case atHolder:
				if s := w.holderSlot(l); s != nil {
					node = w.pod(s).Spec.NodeName
				}
			}
			return in.loseNode(ctx, node, b)
		}
	case faultCrash:
		return func(context.Context) error {
			crashed, err := in.ops.crashPrimary(a / 2)
			if crashed {
				w.rec.Fault(faultCrash, "primary")
			}
			return err
		}
	case faultSecond:
		return func(context.Context) error {
			ran, err := in.ops.runSecondary(b + 2*time.Second)
			if ran {
				w.rec.Fault(faultSecond, (b + 2*time.Second).String())
			}
			return err
		}
	case faultLostReplies:
		return func(ctx context.Context) error {
			w.rec.Fault(faultLostReplies, b.String())
			in.ops.lossy.Add(1)
			sleep(ctx, b)
			in.ops.lossy.Add(-1)
			return nil
		}
	case faultReadLag:
		return func(context.Context) error {
			rs := in.ops.replicas()
			if len(rs) == 0 {
				return nil
			}
			r := rs[0]
			if onSecondary && len(rs) > 1 {
				r = rs[1]
			}
			w.rec.Fault(faultReadLag, fmt.Sprintf("%s %T %s", r.name, lagKinds[kindIndex](), a))
			return in.ops.freeze(r, kindIndex, a)
		}
	case faultLeaseDelete:
		return func(ctx context.Context) error { return in.deleteLease(ctx, l) }
	case faultWebhookLag:
		return func(context.Context) error {
			lagged, err := in.ops.freezeWebhook(b)
			if lagged {
				w.rec.Fault(faultWebhookLag, b.String())
			}
			return err
		}
	case faultRecreate:
		return func(ctx context.Context) error { return in.recreate(ctx, l) }
	}
	panic("unknown fault " + kind)
}

// deleteLease deletes the FencedLease's Lease, the record of its grant, as
// the garbage collector or a break-glass user may (the admission policy lets
// nobody else): the grant must end, and no other pod be granted while its
// holder may still act on it.
func (in *injector) deleteLease(ctx context.Context, l *lease) error {
	w := in.w
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: l.Name}}
	w.rec.Fault(faultLeaseDelete, l.Name)
	if err := ignoreGone(w.cleanup.Delete(ctx, lease)); err != nil {
		return fmt.Errorf("delete Lease %s: %w", l.Name, err)
	}
	return nil
}

// recreate deletes a FencedLease and creates it again as soon as the name is
// free, as a user re-applying it would: its grant must end as any grant
// does (with takeover Safe, not before it expired), and the new one's fences
// must be above every fence of the old one. Each delete and create is
// logged, with the UIDs, beside the fault.
func (in *injector) recreate(ctx context.Context, l *lease) error {
	w := in.w
	w.mu.Lock()
	if l.recreating {
		w.mu.Unlock()
		return nil
	}
	l.recreating = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		l.recreating = false
		w.mu.Unlock()
	}()
	w.rec.Fault(faultRecreate, l.Name)
	old, err := in.deleteFencedLease(ctx, l.Name)
	if err != nil {
		return err
	}
	return in.createFencedLease(ctx, l, old)
}

// deleteFencedLease deletes the FencedLease of that name and returns its UID
// (empty when there was none). The delete holds to the UID read first: a
// delete sent again after its reply was lost, or applied late by an API
// server, then cannot remove a FencedLease created since under the name.
func (in *injector) deleteFencedLease(ctx context.Context, name string) (types.UID, error) {
	w := in.w
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, fl); err != nil {
		w.rec.Fault(faultRecreateDelete, fmt.Sprintf("%s not read: %v", name, err))
		if err := ignoreGone(err); err != nil {
			return "", fmt.Errorf("read FencedLease %s before deleting it: %w", name, err)
		}
		return "", nil
	}
	uid := fl.UID
	err := w.admin.Delete(ctx, fl, client.Preconditions{UID: &uid})
	result := "deleted"
	if err != nil {
		result = err.Error()
	}
	w.rec.Fault(faultRecreateDelete, fmt.Sprintf("%s uid %s rv %s: %s", name, uid, fl.ResourceVersion, result))
	if err := ignoreGone(err); err != nil {
		return "", fmt.Errorf("delete FencedLease %s (uid %s): %w", name, uid, err)
	}
	return uid, nil
}

// createFencedLease creates the lease's FencedLease again once the old one,
// of UID old, is gone: until then the API server answers AlreadyExists. A
// create counts only when it returns another FencedLease than the old one,
// not being deleted: on the HA control plane a create is retried after a
// transient error (testenv.RetryTransient), and a retry that meets
// AlreadyExists must not be taken for the create applied while the old one
// is still there. An attempt is logged unless it ends as the one before did.
func (in *injector) createFencedLease(ctx context.Context, l *lease, old types.UID) error {
	w := in.w
	// Until the name is free. On the HA control plane, an API server that
	// has just started answers NotFound for the FencedLease resource until
	// it serves the CRD: that is waited out too, for a while.
	deadline := time.Now().Add(time.Minute)
	last := ""
	for attempt := 1; ; attempt++ {
		fl := w.fencedLease(l.leaseConfig)
		err := w.admin.Create(ctx, fl)
		created := err == nil && fl.UID != old && fl.DeletionTimestamp == nil
		result := createOutcome(err, fl, created)
		if result != last || created {
			w.rec.Fault(faultRecreateCreate, fmt.Sprintf("%s attempt %d: %s", l.Name, attempt, result))
		}
		last = result
		switch {
		case created:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("create FencedLease %s again (deleted, not yet created): %w", l.Name, ctx.Err())
		case err == nil, apierrors.IsAlreadyExists(err):
			// The old one is still being deleted.
		case apierrors.IsNotFound(err) && time.Now().Before(deadline):
		default:
			return fmt.Errorf("create FencedLease %s again: %w", l.Name, err)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// createOutcome says how a create of a FencedLease ended, for the log.
func createOutcome(err error, fl *fencingv1alpha1.FencedLease, created bool) string {
	switch {
	case err != nil:
		return err.Error()
	case created:
		return "created, uid " + string(fl.UID)
	}
	return fmt.Sprintf("the create returned uid %s (deleting %v): the old one still exists", fl.UID, fl.DeletionTimestamp != nil)
}

// deletePod deletes the slot's pod as a node drain would: gracefully first
// (it keeps running, terminating, and is no longer eligible), then for good
// after grace; replace starts a replacement with a new name on a live node.
func (in *injector) deletePod(ctx context.Context, s *slot, grace time.Duration, seed uint64, replace func(node string) error) error {
	w := in.w
	w.mu.Lock()
	if s.deleting {
		w.mu.Unlock()
		return nil
	}
	s.deleting = true
	pod := s.pod.DeepCopy()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		s.deleting = false
		w.mu.Unlock()
	}()
	w.rec.Fault(faultPodDelete, pod.Name)
	if err := ignoreGone(w.admin.Delete(ctx, pod, client.GracePeriodSeconds(30))); err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	sleep(ctx, grace)
	if err := ignoreGone(w.admin.Delete(ctx, pod, client.GracePeriodSeconds(0))); err != nil {
		return fmt.Errorf("delete pod %s for good: %w", pod.Name, err)
	}
	return replace(w.liveNode(rand.New(rand.NewPCG(seed, 0))))
}

// notReady fails the pod's readiness for d, as a failing probe would.
func (in *injector) notReady(ctx context.Context, s *slot, d time.Duration) error {
	w := in.w
	pod := w.pod(s)
	w.rec.Fault(faultNotReady, pod.Name+" "+d.String())
	if err := ignoreGone(testenv.SetContainersNotReady(ctx, w.admin, pod)); err != nil {
		return err
	}
	sleep(ctx, d)
	return ignoreGone(testenv.SetReady(ctx, w.admin, pod, time.Now()))
}

// loseNode marks a node lost for d (its pods keep their ContainersReady, as
// on a real lost node), then lets it report again. One node at a time is
// lost, so that each lease keeps candidates.
func (in *injector) loseNode(ctx context.Context, node string, d time.Duration) error {
	w := in.w
	w.mu.Lock()
	if len(w.lost) > 0 {
		w.mu.Unlock()
		return nil
	}
	w.lost[node] = true
	w.mu.Unlock()
	w.rec.Fault(faultNodeLost, node+" "+d.String())
	defer func() {
		w.mu.Lock()
		delete(w.lost, node)
		w.mu.Unlock()
	}()
	if err := testenv.SetNodeLost(ctx, w.admin, node); err != nil {
		return err
	}
	sleep(ctx, d)
	return testenv.SetNodeReady(ctx, w.admin, node)
}
