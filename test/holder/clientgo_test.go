package holder_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestClientGoReleaseOnCancelHandover is the baseline for the rolling
// replacement above: client-go's leader election with ReleaseOnCancel and
// its default timing (15 s / 10 s / 2 s), on the same API server. Each
// handover: the leader's context is cancelled (its pod is being replaced),
// it stops leading and releases the Lease; the next candidate, already
// running, takes it when its next retry comes around. Measured from the
// leader's OnStoppedLeading to the next one's OnStartedLeading. It asserts
// only that every handover happened, one leader at a time;
// $HOLDER_CLIENTGO_N sets the number of handovers (3).
func TestClientGoReleaseOnCancelHandover(t *testing.T) {
	n := 3
	if v, err := strconv.Atoi(os.Getenv("HOLDER_CLIENTGO_N")); err == nil && v > 0 {
		n = v
	}
	f := newFixture(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	f.g.Expect(err).NotTo(HaveOccurred())

	type candidate struct {
		cancel  context.CancelFunc
		started chan time.Time
		stopped chan time.Time
		done    chan struct{}
	}
	var mu sync.Mutex
	leaders := 0
	run := func(id string) *candidate {
		ctx, cancel := context.WithCancel(f.ctx)
		c := &candidate{cancel: cancel, started: make(chan time.Time, 1), stopped: make(chan time.Time, 1), done: make(chan struct{})}
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: f.ns, Name: "client-go"},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		go func() {
			defer close(c.done)
			leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
				Lock: lock, ReleaseOnCancel: true,
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) {
						mu.Lock()
						leaders++
						if leaders > 1 {
							t.Errorf("two client-go leaders at once")
						}
						mu.Unlock()
						c.started <- time.Now()
					},
					OnStoppedLeading: func() {
						mu.Lock()
						leaders--
						mu.Unlock()
						c.stopped <- time.Now()
					},
				},
			})
		}()
		return c
	}

	cur := run("c0")
	select {
	case <-cur.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first candidate never led")
	}
	var handovers []time.Duration
	for i := 1; i <= n; i++ {
		next := run("c" + strconv.Itoa(i))
		time.Sleep(100 * time.Millisecond) // the next candidate is up and retrying, as a started pod is
		cur.cancel()
		stopped := <-cur.stopped
		<-cur.done
		var started time.Time
		select {
		case started = <-next.started:
		case <-time.After(30 * time.Second):
			t.Fatalf("handover %d: the next candidate never led", i)
		}
		f.g.Expect(started.After(stopped)).To(BeTrue())
		handovers = append(handovers, started.Sub(stopped))
		cur = next
	}
	cur.cancel()
	<-cur.done
	slices.Sort(handovers)
	q := func(p float64) time.Duration {
		return handovers[int(p*float64(len(handovers)-1))].Round(100 * time.Microsecond)
	}
	t.Logf("%d client-go handovers with ReleaseOnCancel (15s/10s/2s), stopped leading -> next started leading: min %s, p50 %s, p90 %s, max %s",
		n, q(0), q(0.5), q(0.9), q(1))
}
