//go:build bench

package bench_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// cgTiming is a client-go leader election configuration.
type cgTiming struct {
	name                        string
	lease, renewDeadline, retry time.Duration
	releaseOnCancel             bool
}

func (c cgTiming) String() string {
	s := fmt.Sprintf("%s / %s / %s", c.lease, c.renewDeadline, c.retry)
	if c.releaseOnCancel {
		s += ", ReleaseOnCancel"
	}
	return s
}

// cgGroup is one Lease with two client-go candidates. Graceful: the
// leader's context is cancelled (with ReleaseOnCancel it releases the
// Lease). Crash: the leader stops renewing without a word, as a killed
// process (ReleaseOnCancel cannot help a process that is gone). Either way
// a new candidate then takes the stopped one's place.
type cgGroup struct {
	w      *world
	cs     kubernetes.Interface
	name   string
	timing cgTiming
	cause  string
	seq    int

	mu      sync.Mutex
	leaders int
	twice   bool
}

type candidate struct {
	id      string
	cancel  context.CancelFunc
	started chan time.Time
	done    chan struct{}
}

func (g *cgGroup) start() *candidate {
	ctx, cancel := context.WithCancel(g.w.ctx)
	c := &candidate{id: fmt.Sprintf("%s-%d", g.name, g.seq), cancel: cancel, started: make(chan time.Time, 1), done: make(chan struct{})}
	g.seq++
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: g.w.ns, Name: g.name},
		Client:     g.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.id},
	}
	go func() {
		defer close(c.done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: g.timing.releaseOnCancel && g.cause == graceful,
			LeaseDuration: g.timing.lease, RenewDeadline: g.timing.renewDeadline, RetryPeriod: g.timing.retry,
			Callbacks: leaderelection.LeaderCallbacks{
				// A candidate leads from OnStartedLeading until the context
				// it gets there ends (before the release of the Lease, which
				// comes before OnStoppedLeading).
				OnStartedLeading: func(lctx context.Context) {
					now := time.Now()
					g.mu.Lock()
					g.leaders++
					g.twice = g.twice || g.leaders > 1
					g.mu.Unlock()
					c.started <- now
					<-lctx.Done()
					g.mu.Lock()
					g.leaders--
					g.mu.Unlock()
				},
				OnStoppedLeading: func() {},
			},
		})
	}()
	return c
}

// run measures n handoffs.
func (g *cgGroup) run(n int) ([]Sample, error) {
	timeout := 2*g.timing.lease + 30*time.Second
	leader, standby := g.start(), g.start()
	defer func() { leader.cancel(); standby.cancel(); <-leader.done; <-standby.done }()
	select {
	case <-leader.started:
	case <-standby.started:
		leader, standby = standby, leader
	case <-time.After(timeout):
		return nil, fmt.Errorf("Lease %s: no candidate ever led", g.name)
	}
	time.Sleep(g.timing.retry + 100*time.Millisecond) // the standby is retrying
	var out []Sample
	for range n {
		jitter()
		t0 := time.Now()
		leader.cancel()
		var knows time.Time
		select {
		case knows = <-standby.started:
		case <-time.After(timeout):
			return out, fmt.Errorf("Lease %s, handoff %d: the next candidate never led", g.name, len(out)+1)
		}
		<-leader.done
		var published, renewed time.Time
		if err := g.w.rec.poll(g.w.ctx, 10*time.Second, "holderIdentity "+standby.id, func() bool {
			published, renewed = g.w.rec.holder[g.name+"/"+standby.id], g.w.rec.renewedBy[g.name+"/"+leader.id]
			return !published.IsZero()
		}); err != nil {
			return out, err
		}
		out = append(out, Sample{Published: ms(published.Sub(t0)), Knows: ms(knows.Sub(t0)), AfterRenewal: ms(published.Sub(renewed))})
		leader, standby = standby, g.start()
		time.Sleep(g.timing.retry + 300*time.Millisecond) // the new candidate is up and retrying, as a started pod is
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.twice {
		return out, fmt.Errorf("Lease %s: two client-go leaders at once", g.name)
	}
	return out, nil
}
