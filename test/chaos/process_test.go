//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
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

// Pacing of a holder process. A holder writes several times a second; a
// standby looks at its pod a few times a second, as a workload watching its
// token file would.
const (
	writeEvery   = 100 * time.Millisecond
	pollEvery    = 200 * time.Millisecond
	writeTimeout = 10 * time.Second
	// A stale process pauses at a write with this probability, for a time
	// in [pauseMin, pauseMax): longer than any lease, so the grant may well
	// have moved on. Half of the pauses also fail the pod's readiness probe,
	// as a frozen process would, which ends the grant.
	pauseChance        = 0.03
	pauseMin, pauseMax = 1500 * time.Millisecond, 6 * time.Second
	// A standby copies the current fence from the status and writes with it
	// with this probability per look.
	impostorChance = 0.02
	// A write gives up after a few milliseconds with this probability, as a
	// client with a tight deadline would: its outcome is unknown (the API
	// server may have applied it), which the checks must allow for.
	shortTimeoutChance = 0.02
)

// process is the workload of one pod: it acts as the pod, with a client
// that authenticates with a token bound to it, and writes the lease's
// protected objects whenever it believes it holds the lease.
type process struct {
	w     *world
	lease *lease
	name  string
	uid   types.UID
	c     client.Client
	rng   *rand.Rand
	stale bool
	seq   int
	// ss is set for a process of a renewal Holder lease (runSession).
	ss *sessionState
}

func newProcess(w *world, l *lease, pod *corev1.Pod, c client.Client) *process {
	h := fnv.New64a()
	_, _ = h.Write([]byte(pod.Name))
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), h.Sum64()))
	return &process{w: w, lease: l, name: pod.Name, uid: pod.UID, c: c, rng: rng, stale: rng.IntN(2) == 0}
}

// run loops until the run stops or the pod is gone (its token dies with it).
func (p *process) run() {
	ctx := p.w.ctx
	for {
		select {
		case <-p.w.stop:
			return
		default:
		}
		role, fence, gone := p.look(ctx)
		if gone {
			return
		}
		if role != fencingv1alpha1.RoleHolder || fence == 0 {
			if p.rng.Float64() < impostorChance {
				p.impostor(ctx)
			}
			p.pace(pollEvery)
			continue
		}
		if p.stale && p.rng.Float64() < pauseChance {
			p.pause(ctx, fence)
			continue
		}
		p.write(ctx, fence, SourceFresh)
		p.pace(writeEvery)
	}
}

// look reads the process's own pod from the API server: what its token
// files would show.
func (p *process) look(ctx context.Context) (role string, fence int64, gone bool) {
	pod := &corev1.Pod{}
	call := p.w.rec.Now()
	err := p.c.Get(ctx, client.ObjectKey{Namespace: p.w.ns, Name: p.name}, pod)
	ret := p.w.rec.Now()
	switch {
	case apierrors.IsNotFound(err), apierrors.IsUnauthorized(err):
		return "", 0, true
	case err != nil:
		return "", 0, ctx.Err() != nil
	case pod.UID != p.uid:
		return "", 0, true
	}
	role = pod.Annotations[fencingv1alpha1.AnnotationRole]
	if pod.Annotations[fencingv1alpha1.AnnotationLease] != p.lease.Name {
		return "", 0, false
	}
	fence, err = record.ParseFence(pod.Annotations[fencingv1alpha1.AnnotationFence])
	if err != nil || role != fencingv1alpha1.RoleHolder {
		return role, 0, false
	}
	p.w.rec.HolderRead(p.lease.Name, p.name, p.uid, fence, call, ret)
	return role, fence, false
}

// pause stops the process without reading its pod, then writes with the
// fence it had, without looking whether it still holds it.
func (p *process) pause(ctx context.Context, fence int64) {
	p.pauseThen(ctx, fence, nil, nil)
}

// pauseThen draws a pause (its length, and whether the pod's readiness
// probe fails meanwhile), records it, runs stop before and resume after it,
// and then makes 1–3 stale writes with fence, as a resumed process does
// before it looks again.
func (p *process) pauseThen(ctx context.Context, fence int64, stop, resume func()) {
	d := pauseMin + time.Duration(p.rng.Int64N(int64(pauseMax-pauseMin)))
	probe := p.rng.IntN(2) == 0
	kind := "pause"
	if probe {
		kind = "pause+probe"
	}
	p.w.rec.Fault(kind, fmt.Sprintf("%s %s", p.name, d))
	if stop != nil {
		stop()
	}
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
	if resume != nil {
		resume()
	}
	for i := 1 + p.rng.IntN(3); i > 0; i-- {
		p.write(ctx, fence, SourceStale)
		p.pace(writeEvery / 2)
	}
	if p.rng.Float64() < statusAttackChance {
		p.statusAttack(ctx, fence, SourceStale)
	}
}

// impostor writes with the fence the status records, which this standby
// copied: the webhook must refuse it for not being the holder.
func (p *process) impostor(ctx context.Context) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := p.w.admin.Get(ctx, client.ObjectKey{Namespace: p.w.ns, Name: p.lease.Name}, fl); err != nil || fl.Status.Fence == 0 {
		return
	}
	if fl.Status.Holder != nil && fl.Status.Holder.PodUID == p.uid {
		return // it became the holder meanwhile
	}
	p.write(ctx, fl.Status.Fence, SourceImpostor)
	if p.rng.Float64() < statusAttackChance/5 {
		p.statusAttack(ctx, fl.Status.Fence, SourceImpostor)
	}
}

// write patches one of the lease's objects with the fence and a value no
// other write has, and records the attempt.
func (p *process) write(ctx context.Context, fence int64, src Source) {
	p.seq++
	object := p.lease.Objects[p.rng.IntN(len(p.lease.Objects))]
	value := fmt.Sprintf("%s/%d", p.name, p.seq)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"data":{"value":%q}}`,
		fencingv1alpha1.AnnotationFence, strconv.FormatInt(fence, 10), value)
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = p.w.ns, object
	// The write gets its own context: stopping the run must not cut a
	// write in flight into one of unknown outcome.
	timeout := writeTimeout
	if p.rng.Float64() < shortTimeoutChance {
		timeout = between(p.rng, time.Millisecond, 30*time.Millisecond)
		p.w.rec.Fault("write-deadline", p.name)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	call := p.w.rec.Now()
	err := p.c.Patch(wctx, cm, client.RawPatch(types.MergePatchType, []byte(patch)))
	ret := p.w.rec.Now()
	outcome, reason := Classify(err)
	a := Attempt{Process: p.name, Pod: p.name, PodUID: p.uid, Lease: p.lease.Name, Object: object, Fence: fence, Value: value,
		Source: src, Call: call, Return: ret, Outcome: outcome, Reason: reason}
	if err != nil {
		a.Err = err.Error()
	}
	p.w.rec.Attempt(a)
}

// pace waits about d (jittered, so processes do not march in step) or until
// the run stops.
func (p *process) pace(d time.Duration) {
	j := d/2 + time.Duration(p.rng.Int64N(int64(d)))
	t := time.NewTimer(j)
	defer t.Stop()
	select {
	case <-p.w.stop:
	case <-t.C:
	}
}
