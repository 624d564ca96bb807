//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// Pacing of a shard process. Its view of its shards is the projected file
// /etc/fencedlease/shards, which the kubelet refreshes at its syncs of the
// pod: the process reads its pod's annotation at random intervals in
// [syncMin, syncMax) and acts on what it read until the next one, so that
// it writes with shards that moved since. It writes one of its shards'
// objects every shardWriteEvery or so.
const (
	syncMin, syncMax = 200 * time.Millisecond, 2 * time.Second
	shardWriteEvery  = 300 * time.Millisecond
	// A shard process plays an impostor with this probability per round:
	// it writes a shard with another pod's fence of it, or with the fence
	// of another of its shards.
	shardImpostorChance = 0.03
)

// shardProcess is the workload of one candidate pod of a shard set: it acts
// as the pod, with a client that authenticates with a token bound to it,
// and writes the objects of the shards it believes it owns, each with the
// shard's fence.
type shardProcess struct {
	w     *world
	set   *shardSet
	name  string
	uid   types.UID
	c     client.Client
	rng   *rand.Rand
	stale bool
	seq   int
	// view is the projected file as of the last sync; nextSync when the
	// kubelet syncs again.
	view     map[string]int64
	nextSync time.Time
}

func newShardProcess(w *world, ss *shardSet, pod *corev1.Pod, c client.Client) *shardProcess {
	h := fnv.New64a()
	_, _ = h.Write([]byte(pod.Name))
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), h.Sum64()))
	return &shardProcess{w: w, set: ss, name: pod.Name, uid: pod.UID, c: c, rng: rng, stale: rng.IntN(2) == 0, view: map[string]int64{}}
}

// run loops until the run stops or the pod is gone (its token dies with it).
func (p *shardProcess) run() {
	ctx := p.w.ctx
	for {
		select {
		case <-p.w.stop:
			return
		default:
		}
		if !time.Now().Before(p.nextSync) {
			if gone := p.sync(ctx); gone {
				return
			}
		}
		if p.rng.Float64() < shardImpostorChance {
			p.impostor(ctx)
		}
		if len(p.view) == 0 {
			p.pace(pollEvery)
			continue
		}
		if p.stale && p.rng.Float64() < pauseChance {
			p.pause(ctx)
			continue
		}
		key := p.pick(p.view)
		p.write(ctx, key, p.view[key], SourceFresh)
		p.pace(shardWriteEvery)
	}
}

// sync reads the process's own pod from the API server, as the kubelet
// does when it projects the annotation to the file, and makes it the view.
func (p *shardProcess) sync(ctx context.Context) (gone bool) {
	p.nextSync = time.Now().Add(between(p.rng, syncMin, syncMax))
	pod := &corev1.Pod{}
	call := p.w.rec.Now()
	err := p.c.Get(ctx, client.ObjectKey{Namespace: p.w.ns, Name: p.name}, pod)
	ret := p.w.rec.Now()
	switch {
	case apierrors.IsNotFound(err), apierrors.IsUnauthorized(err):
		return true
	case err != nil:
		return ctx.Err() != nil // the view stays as it was
	case pod.UID != p.uid:
		return true
	}
	shards, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
	if err != nil {
		return false // the ShardChecker reports it
	}
	for key, fence := range shards {
		p.w.rec.HolderRead(ShardName(p.set.Name, key), p.name, p.uid, fence, call, ret)
	}
	p.view = shards
	return false
}

// pick draws one of the shards' keys.
func (p *shardProcess) pick(shards map[string]int64) string {
	keys := make([]string, 0, len(shards))
	for k := range shards {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[p.rng.IntN(len(keys))]
}

// pause stops the process without syncing its view, then writes 1–3 of its
// shards with the fences it had, without looking whether it still owns
// them. Half of the pauses fail the pod's readiness probe meanwhile, which
// ends its grants.
func (p *shardProcess) pause(ctx context.Context) {
	had := p.view
	d := pauseMin + time.Duration(p.rng.Int64N(int64(pauseMax-pauseMin)))
	probe := p.rng.IntN(2) == 0
	kind := "pause"
	if probe {
		kind = "pause+probe"
	}
	p.w.rec.Fault(kind, fmt.Sprintf("%s %s", p.name, d))
	if probe {
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = p.w.ns, p.name
		sleep(ctx, 500*time.Millisecond)
		_ = testenv.SetContainersNotReady(ctx, p.w.admin, pod)
		sleep(ctx, d-500*time.Millisecond)
		_ = testenv.SetReady(ctx, p.w.admin, pod, time.Now())
	} else {
		sleep(ctx, d)
	}
	for i := 1 + p.rng.IntN(3); i > 0; i-- {
		key := p.pick(had)
		p.write(ctx, key, had[key], SourceStale)
		p.pace(writeEvery / 2)
	}
	p.nextSync = time.Time{}
}

// impostor writes a shard it does not own (by the view) with a fence that
// is no proof of ownership: half of the time another candidate's fence of
// one of that candidate's shards, read from its pod; otherwise the fence of
// one of its own shards on another shard's object. The webhook must refuse
// both: for not being the owner, or for a fence that is not the shard's.
func (p *shardProcess) impostor(ctx context.Context) {
	if p.rng.IntN(2) == 0 || len(p.view) == 0 {
		var pods corev1.PodList
		if err := p.w.admin.List(ctx, &pods, client.InNamespace(p.w.ns), client.MatchingLabels{shardSetLabel: p.set.Name}); err != nil {
			return
		}
		var others []corev1.Pod
		for _, o := range pods.Items {
			if o.UID != p.uid && o.Annotations[record.AnnotationShards] != "" {
				others = append(others, o)
			}
		}
		if len(others) == 0 {
			return
		}
		sort.Slice(others, func(i, j int) bool { return others[i].Name < others[j].Name })
		shards, err := record.ParseShards(others[p.rng.IntN(len(others))].Annotations[record.AnnotationShards])
		if err != nil || len(shards) == 0 {
			return
		}
		key := p.pick(shards)
		p.write(ctx, key, shards[key], SourceImpostor)
		return
	}
	own := p.pick(p.view)
	key := strconv.Itoa(p.rng.IntN(int(p.set.Shards)))
	if key == own {
		return
	}
	p.write(ctx, key, p.view[own], SourceImpostor)
}

// write patches the shard's object with the fence and a value no other
// write has, and records the attempt.
func (p *shardProcess) write(ctx context.Context, key string, fence int64, src Source) {
	p.seq++
	object := shardObject(p.set.Name, key)
	value := fmt.Sprintf("%s/%d", p.name, p.seq)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"data":{"value":%q}}`,
		fencingv1alpha1.AnnotationFence, strconv.FormatInt(fence, 10), value)
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = p.w.ns, object
	timeout := writeTimeout
	if p.rng.Float64() < shortTimeoutChance {
		timeout = between(p.rng, time.Millisecond, 30*time.Millisecond)
		p.w.rec.Fault("write-deadline", p.name)
	}
	// Its own context: stopping the run must not cut a write in flight.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	call := p.w.rec.Now()
	err := p.c.Patch(wctx, cm, client.RawPatch(types.MergePatchType, []byte(patch)))
	ret := p.w.rec.Now()
	outcome, reason := Classify(err)
	a := Attempt{Process: p.name, Pod: p.name, PodUID: p.uid, Lease: ShardName(p.set.Name, key), Set: p.set.Name, Object: object,
		Fence: fence, Value: value, Source: src, Call: call, Return: ret, Outcome: outcome, Reason: reason}
	if err != nil {
		a.Err = err.Error()
	}
	p.w.rec.Attempt(a)
}

// pace waits about d (jittered) or until the run stops.
func (p *shardProcess) pace(d time.Duration) {
	j := d/2 + time.Duration(p.rng.Int64N(int64(d)))
	t := time.NewTimer(j)
	defer t.Stop()
	select {
	case <-p.w.stop:
	case <-t.C:
	}
}
