package sim

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/fencedlease/fencedlease/internal/policy"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Reconciler is the controller under test: one per replica, created afresh
// when the replica restarts, so that it keeps nothing but what it reads.
type Reconciler interface {
	Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error)
}

// Beater is a reconciler with a heartbeat to renew now and then.
type Beater interface {
	Beat(ctx context.Context) error
}

// beatKey is the key under which a replica's renewal of its heartbeat runs,
// beside its reconciles.
var beatKey = types.NamespacedName{Name: "(heartbeat)"}

// NewReconciler builds a replica's reconciler on the simulated client, live
// reader and clock.
type NewReconciler func(c Clients) Reconciler

// Config is one simulated run. The zero value of each probability turns its
// fault off.
type Config struct {
	Seed     int64
	Steps    int
	Replicas int
	// LostReplies is the probability that a write is applied but its reply
	// is lost; LostRequests that it is lost before it is applied.
	LostReplies  float64
	LostRequests float64
	// Crashes is the probability, per step, that a replica crashes and
	// restarts with empty memory.
	Crashes float64
	// PodsBehind is the probability that a replica starts with a pod cache
	// that has not yet delivered every pod of the world (its informer
	// started while they were being created), and delivers nothing more
	// for up to a quarter of the run. Drawn from a generator of its own:
	// a seed whose replicas all start current runs as without it.
	PodsBehind float64
	// PausesBeforeWrites is the probability that a replica, its next call
	// a write, pauses right before it, as a process stalled between its
	// reads and its write would: the write lands when it resumes. Pauses
	// at random steps (pauseSomeone) rarely stop a replica at the very
	// write that matters, such as a publication's last.
	PausesBeforeWrites float64
	// World chooses the workload and what happens to it.
	World WorldConfig
	// Webhooks is how many replicas of the fencing webhook decide the
	// workloads' writes to protected objects, each with a FencedLease cache
	// of its own; NewWebhook builds each one's handler. With none, the
	// workloads write nothing.
	Webhooks   int
	NewWebhook NewWebhook
	// Shards, when set, runs FencedShardSets instead of FencedLeases: the
	// reconciler built is the FencedShardSet controller, the world holds
	// the sets and their pods, and the checker checks every shard
	// (shards.go).
	Shards *ShardsConfig
	// Settle ends the run with a settling phase: the faults stop, and every
	// FencedLease with an eligible candidate must then come to be held,
	// published, and its pods' holder conditions in line (liveness).
	Settle bool
	// Trace keeps a readable trace of every step.
	Trace bool
}

// Result is the outcome of a run.
type Result struct {
	Seed       int64
	Steps      int
	Violations []string
	// Trace is the run step by step (only with Config.Trace).
	Trace []string
	// Stats counts what happened.
	Stats Stats
}

// Stats counts what a run did, to tell a run that explored from one that idled.
type Stats struct {
	Reconciles, Calls, Writes, Conflicts, LostReplies int
	Grants, Publishes, Crashes, WorldChanges          int
	// The enforcement side: decisions of the fencing webhook, those it
	// denied, those whose replica's FencedLease cache lagged behind the
	// FencedLease, the protected writes applied, the deletes sent by a
	// process whose fence was older than the newest committed, the writes
	// of impostors (a pod that holds nothing, with a fence read off the
	// object), and the writes the admission policy refused.
	WebhookDecisions, WebhookDenials, LaggingCacheDecisions      int
	ProtectedWrites, StaleDeletes, ImpostorWrites, PolicyDenials int
	// StatusWrites counts the status subresource writes of protected
	// objects sent, MetadataChangingWrites those of them that tried to
	// remove the protected-by label or move the stored fence.
	StatusWrites, MetadataChangingWrites int
	// Settled counts the runs whose settling phase ended with every
	// FencedLease that could be held held.
	Settled int
	// PodsBehind counts the replicas that started with a pod cache behind
	// the world's pods (Config.PodsBehind).
	PodsBehind int
	// Heartbeats counts the renewals of the operator's heartbeat, which
	// renew every grant it vouches for.
	Heartbeats int
	// Forks counts the times a reconcile ran steps at once
	// (Concurrently), Overtaken those in which a later step finished
	// before an earlier one.
	Forks, Overtaken int
	// PausesBeforeWrites counts the replicas paused right before a write
	// (Config.PausesBeforeWrites).
	PausesBeforeWrites int
	// ShardGrants, ShardRevocations and ShardPublications count, in a run
	// with shard sets, the grants of shards committed, the grants revoked,
	// and the shards published to a pod with a new fence.
	ShardGrants, ShardRevocations, ShardPublications int
}

// Sim is one run.
type Sim struct {
	cfg      Config
	rng      *rand.Rand
	store    *store
	clock    *clocktesting.FakePassiveClock
	replicas []*replica
	world    *world
	checker  *checker
	newRec   NewReconciler
	// hooks are the fencing webhook's replicas; clients the requests to
	// protected objects in flight; procs the pods' workload processes.
	hooks      []*hook
	clients    []*actor
	procs      procs
	principals policy.Principals
	step       int
	// kinds are the kinds the replicas' caches serve.
	kinds []string
	// shards is the shard world and its checker (Config.Shards).
	shards *shardWorld
	trace  []string
	stats  Stats
}

// replica is one operator process: its reconciler, its caches and the
// reconciles it is running.
type replica struct {
	id          int
	rec         Reconciler
	views       map[string]int64 // kind -> store revision its cache serves
	running     map[types.NamespacedName]*actor
	pausedUntil int
	// podsHeldUntil is the step until which its pod cache delivers
	// nothing (Config.PodsBehind).
	podsHeldUntil int
	// setReads is, per FencedShardSet, the store revision of the replica's
	// last read of it (for the checker: what the replica judged by).
	setReads map[string]int64
}

func (r *replica) view(kind string) int64 { return r.views[kind] }

// actor is one running reconcile: a goroutine that blocks on every API call
// until the scheduler runs it, so that only one goroutine ever runs at a time
// and the run is deterministic.
type actor struct {
	rep     *replica // nil for a client's request
	key     types.NamespacedName
	calls   chan *call
	done    chan struct{}
	next    *call
	crashed bool
	// onDone runs when a client's request has finished.
	onDone func()
	// children are the actors of the functions the reconcile runs at once
	// and waits on (Concurrently), forkReply its answer when they have all
	// finished; parent is the reconcile a child runs for.
	children  []*actor
	forkReply chan error
	parent    *actor
	overtaken bool
}

// call is one API call of a reconcile, run when the scheduler picks it.
type call struct {
	desc  string
	write bool
	exec  func() error
	reply chan error
	// fork, when set, is no API call: the reconcile runs these functions
	// at once, on ctx, and waits until they have all returned.
	fork []func(context.Context)
	ctx  context.Context
}

type actorKey struct{}

// Clients are what a replica's reconciler is built on.
type Clients struct {
	Client    *replicaClient
	APIReader *liveReader
	Clock     *clocktesting.FakePassiveClock
	// Concurrently runs steps of one reconcile at once, their calls
	// scheduled as any others (fork.go).
	Concurrently func(ctx context.Context, steps ...func(context.Context))
}

// Run simulates one seeded schedule.
func Run(cfg Config, indexes []Index, newRec NewReconciler) Result {
	st, err := newStore(indexes)
	if err != nil {
		return Result{Seed: cfg.Seed, Violations: []string{"setup: " + err.Error()}}
	}
	s := &Sim{
		cfg:    cfg,
		rng:    rand.New(rand.NewSource(cfg.Seed)), //nolint:gosec // a reproducible schedule, not a secret
		store:  st,
		clock:  clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		newRec: newRec,
	}
	s.checker = newChecker()
	s.procs = procs{}
	s.principals = policy.Principals{OperatorUsers: []string{operatorUser}}
	s.world = newWorld(s, cfg.World)
	s.kinds = kinds
	setUp := s.world.setUp
	if cfg.Shards != nil {
		s.kinds = shardKinds
		s.shards = newShardWorld(s, *cfg.Shards)
		setUp = s.shards.setUp
	}
	if err := setUp(); err != nil {
		return Result{Seed: cfg.Seed, Violations: []string{"setup: " + err.Error()}}
	}
	behind := rand.New(rand.NewSource(^cfg.Seed)) //nolint:gosec // a reproducible schedule, not a secret
	for i := 0; i < max(cfg.Replicas, 1); i++ {
		r := &replica{id: i, running: map[types.NamespacedName]*actor{}, setReads: map[string]int64{}}
		s.restart(r)
		if behind.Float64() < cfg.PodsBehind {
			// Somewhere between the first pod's creation and the last.
			r.views["Pod"] = s.world.podsFrom + behind.Int63n(s.store.rev-s.world.podsFrom+1)
			r.podsHeldUntil = behind.Intn(max(cfg.Steps/4, 1))
			s.stats.PodsBehind++
		}
		s.replicas = append(s.replicas, r)
	}
	for i := 0; i < cfg.Webhooks && cfg.NewWebhook != nil; i++ {
		h := &hook{id: i, view: s.store.rev}
		h.handler = cfg.NewWebhook(WebhookClients{Cache: hookCache{s: s, h: h}, APIReader: hookLive{s: s, h: h}})
		s.hooks = append(s.hooks, h)
	}
	for s.step = 0; s.step < cfg.Steps && len(s.checker.violations) == 0; s.step++ {
		s.once()
	}
	if cfg.Settle && len(s.checker.violations) == 0 {
		s.settle()
	}
	for _, r := range s.replicas {
		s.crash(r) // let every goroutine finish
	}
	s.crashClients()
	if s.shards != nil {
		c := s.shards.check
		s.stats.ShardGrants, s.stats.ShardRevocations, s.stats.ShardPublications = c.grantsSeen, c.revocations, c.publications
	}
	return Result{Seed: cfg.Seed, Steps: s.step, Violations: s.checker.violations, Trace: s.trace, Stats: s.stats}
}

// operatorUser is the user name of the operator's replicas, for the
// admission policy.
const operatorUser = "system:serviceaccount:fencedlease-system:fencedlease-controller-manager"

// restart gives a replica a fresh reconciler and caches that have just
// listed everything.
func (s *Sim) restart(r *replica) {
	r.views, r.podsHeldUntil = map[string]int64{}, 0
	for _, k := range s.kinds {
		r.views[k] = s.store.rev
	}
	r.rec = s.newRec(Clients{Client: &replicaClient{sim: s, rep: r}, APIReader: &liveReader{sim: s, rep: r}, Clock: s.clock, Concurrently: s.Concurrently})
}

var kinds = []string{"FencedLease", "Lease", "Pod", "Node"}

// once takes one step: one choice among running an API call, starting a
// reconcile, letting a cache catch up, changing the world, moving the clock,
// pausing or crashing a replica.
func (s *Sim) once() {
	type choice struct {
		weight int
		do     func() bool
	}
	change, procStep, recreate := s.world.change, s.world.procStep, s.world.recreateSoon
	if s.shards != nil {
		change, procStep, recreate = s.shards.change, func() bool { return false }, s.shards.recreateSoon
	}
	choices := []choice{
		{50, s.resumeSomeone},
		{25, s.startSomeone},
		{25, s.catchUp},
		{s.cfg.World.changeWeight(), change},
		{12, procStep},
		{10, recreate},
		{5, s.tick},
		{8, s.beatSomeone},
		{1, s.pauseSomeone},
		{1, func() bool {
			if !s.chance(s.cfg.Crashes * 80) {
				return false
			}
			r := s.replicas[s.rng.Intn(len(s.replicas))]
			s.tracef("step %d: replica %d crashes and restarts", s.step, r.id)
			s.crash(r)
			s.restart(r)
			s.stats.Crashes++
			return true
		}},
	}
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	for tries := 0; tries < 20; tries++ {
		n := s.rng.Intn(total)
		for _, c := range choices {
			if n < c.weight {
				if c.do() {
					return
				}
				break
			}
			n -= c.weight
		}
	}
}

func (s *Sim) active(r *replica) bool { return r.pausedUntil <= s.step }

// resumeSomeone runs the next API call of a running reconcile or request.
func (s *Sim) resumeSomeone() bool {
	var ready []*actor
	for _, r := range s.replicas {
		if !s.active(r) {
			continue
		}
		for _, a := range sortedActors(r) {
			if a.next != nil { // not a reconcile waiting on its children
				ready = append(ready, a)
			}
		}
	}
	ready = append(ready, s.clients...)
	if len(ready) == 0 {
		return false
	}
	a := ready[s.rng.Intn(len(ready))]
	c := a.next
	if c.write && a.rep != nil && s.pauseBefore(a.rep, c) {
		return true
	}
	s.tracef("step %d: %s", s.step, c.desc)
	s.stats.Calls++
	if c.write {
		s.stats.Writes++
	}
	err := c.exec()
	if err != nil {
		s.tracef("  -> %s", firstLine(err.Error()))
		if strings.Contains(err.Error(), "object was modified") || strings.Contains(err.Error(), "the object has been modified") {
			s.stats.Conflicts++
		}
	}
	c.reply <- err
	s.await(a)
	return true
}

// startSomeone starts a reconcile of a FencedLease on a replica that is not
// already reconciling it (controller-runtime never runs one key twice at once).
func (s *Sim) startSomeone() bool {
	r := s.replicas[s.rng.Intn(len(s.replicas))]
	if !s.active(r) {
		return false
	}
	name := "db"
	switch {
	case s.shards != nil:
		name = s.shards.sets[s.rng.Intn(len(s.shards.sets))]
	case s.rng.Intn(5) == 0:
		name = "other"
	}
	key := types.NamespacedName{Namespace: s.world.namespace, Name: name}
	if r.running[key] != nil {
		return false
	}
	a := &actor{rep: r, key: key, calls: make(chan *call), done: make(chan struct{})}
	r.running[key] = a
	s.stats.Reconciles++
	s.tracef("step %d: replica %d starts reconciling %s", s.step, r.id, key)
	ctx := withActor(a)
	rec := r.rec
	go func() {
		defer close(a.done)
		_, _ = rec.Reconcile(ctx, reconcileRequest(key))
	}()
	s.await(a)
	return true
}

// beatSomeone starts a renewal of the heartbeat on a replica that has one
// and is not renewing it already.
func (s *Sim) beatSomeone() bool {
	r := s.replicas[s.rng.Intn(len(s.replicas))]
	b, ok := r.rec.(Beater)
	if !ok || !s.active(r) || r.running[beatKey] != nil {
		return false
	}
	a := &actor{rep: r, key: beatKey, calls: make(chan *call), done: make(chan struct{})}
	r.running[beatKey] = a
	s.tracef("step %d: replica %d renews its heartbeat", s.step, r.id)
	ctx := withActor(a)
	go func() {
		defer close(a.done)
		_ = b.Beat(ctx)
	}()
	s.await(a)
	return true
}

// await waits until the actor blocks on its next call or finishes.
func (s *Sim) await(a *actor) {
	select {
	case c := <-a.calls:
		if c.fork != nil {
			s.fork(a, c)
			return
		}
		a.next = c
	case <-a.done:
		a.next = nil
		if a.rep != nil {
			delete(a.rep.running, a.key)
			s.childDone(a)
			return
		}
		for i, c := range s.clients {
			if c == a {
				s.clients = append(s.clients[:i], s.clients[i+1:]...)
				break
			}
		}
		if a.onDone != nil {
			a.onDone()
		}
	}
}

// do is every API call of a reconcile: it hands the call to the scheduler
// and waits for its result. A crashed replica's calls fail at once.
func (s *Sim) do(ctx context.Context, desc string, write bool, exec func() error) error {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil {
		return exec() // the world and the checker read directly
	}
	if a.crashed {
		return context.Canceled
	}
	c := &call{desc: desc, write: write, exec: exec, reply: make(chan error)}
	a.calls <- c
	return <-c.reply
}

// crash stops every reconcile of a replica: each pending call and every later
// one fails, and the goroutines run to their end.
func (s *Sim) crash(r *replica) {
	actors := sortedActors(r)
	for _, a := range actors {
		a.crashed = true
	}
	for _, a := range actors {
		for a.next != nil {
			a.next.reply <- context.Canceled
			s.await(a)
		}
	}
}

// crashClients ends every request in flight: each pending call fails.
func (s *Sim) crashClients() {
	for len(s.clients) > 0 {
		a := s.clients[0]
		a.crashed = true
		for a.next != nil {
			a.next.reply <- context.Canceled
			s.await(a)
		}
	}
}

// catchUp lets one informer cache of one replica receive some of the events
// it lags behind on (in order, as a watch delivers them); or the cache of a
// webhook replica, or the watch and the token files of a workload process.
func (s *Sim) catchUp() bool {
	switch n := s.rng.Intn(4); {
	case n == 0 && len(s.hooks) > 0:
		h := s.hooks[s.rng.Intn(len(s.hooks))]
		return s.advance(&h.view)
	case n == 1 && len(s.procs) > 0:
		uids := make([]string, 0, len(s.procs))
		for uid := range s.procs {
			uids = append(uids, string(uid))
		}
		sort.Strings(uids)
		return s.advance(&s.procs[types.UID(uids[s.rng.Intn(len(uids))])].view)
	}
	r := s.replicas[s.rng.Intn(len(s.replicas))]
	moved := false
	for _, kind := range s.kinds {
		behind := s.store.rev - r.views[kind]
		if behind <= 0 || s.rng.Intn(2) == 0 || kind == "Pod" && s.step < r.podsHeldUntil {
			continue
		}
		moved = true
		if s.rng.Intn(3) > 0 {
			r.views[kind] = s.store.rev
		} else {
			r.views[kind] += 1 + s.rng.Int63n(behind)
		}
	}
	return moved
}

// advance moves one view towards now by some of the events it lags behind
// on.
func (s *Sim) advance(view *int64) bool {
	behind := s.store.rev - *view
	if behind <= 0 {
		return false
	}
	if s.rng.Intn(3) > 0 {
		*view = s.store.rev
	} else {
		*view += 1 + s.rng.Int63n(behind)
	}
	return true
}

// tick moves the clock.
func (s *Sim) tick() bool {
	steps := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, time.Second, 3 * time.Second, 7 * time.Second}
	d := steps[s.rng.Intn(len(steps))]
	s.clock.SetTime(s.clock.Now().Add(d))
	s.tracef("step %d: clock +%s", s.step, d)
	return true
}

// pauseSomeone stops scheduling a replica for a while, as a long GC pause or
// a frozen VM would; its caches do not move either.
func (s *Sim) pauseSomeone() bool {
	if len(s.replicas) < 2 {
		return false
	}
	r := s.replicas[s.rng.Intn(len(s.replicas))]
	if !s.othersActive(r) {
		return false // one replica at least keeps going
	}
	r.pausedUntil = s.step + 20 + s.rng.Intn(150)
	s.tracef("step %d: replica %d pauses until step %d", s.step, r.id, r.pausedUntil)
	return true
}

// pauseBefore pauses r, now and then, right before c, one of its writes
// (Config.PausesBeforeWrites), for long enough that another replica can
// run a whole takeover meanwhile; c stays next and is applied when r
// resumes. It draws nothing from the schedule's generator when the
// probability is 0, so seeds run without it as before.
func (s *Sim) pauseBefore(r *replica, c *call) bool {
	if !s.chance(s.cfg.PausesBeforeWrites) || !s.othersActive(r) {
		return false
	}
	r.pausedUntil = s.step + 40 + s.rng.Intn(250)
	s.stats.PausesBeforeWrites++
	s.tracef("step %d: replica %d pauses right before %q until step %d", s.step, r.id, c.desc, r.pausedUntil)
	return true
}

// othersActive says whether r has another replica and every other one is
// running: one replica at least keeps going.
func (s *Sim) othersActive(r *replica) bool {
	if len(s.replicas) < 2 {
		return false
	}
	for _, other := range s.replicas {
		if other != r && !s.active(other) {
			return false
		}
	}
	return true
}

func (s *Sim) chance(p float64) bool { return p > 0 && s.rng.Float64() < p }

func (s *Sim) tracef(format string, args ...any) {
	if s.cfg.Trace {
		s.trace = append(s.trace, fmt.Sprintf(format, args...))
	}
}

func sortedActors(r *replica) []*actor {
	out := make([]*actor, 0, len(r.running))
	for _, a := range r.running {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.String() < out[j].key.String() })
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func reconcileRequest(key types.NamespacedName) reconcile.Request {
	return reconcile.Request{NamespacedName: key}
}

func logrContext(ctx context.Context) context.Context { return logr.NewContext(ctx, logr.Discard()) }
