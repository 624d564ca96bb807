package storage_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/test/storage"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// chaosRun is what one run of concurrent writers recorded.
type chaosRun struct {
	history []storage.Attempt
	grants  []storage.Grant
}

// chaosOptions size a run.
type chaosOptions struct {
	writers  int
	writes   int // per writer
	duration time.Duration
	rules    *gateway.Rules
}

// runChaos runs writers processes, each a pod of one FencedLease (operator
// renewal, Immediate takeover), writing through two gateway replicas and with
// fences3 to a few shared keys, while the test pauses random writers
// (SIGSTOP, 0.1 to 1.5s), makes the holder pod not ready (the operator
// hands the grant over) and deletes a holder pod (its replacement joins
// with a new process). A watch of the Lease records every committed grant.
func runChaos(t *testing.T, o chaosOptions) chaosRun {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t, "chaos")
	gwBucket, ptrBucket := ns+"-gw", ns+"-ptr"
	g.Expect(store.CreateBucket(ctx, gwBucket)).To(Succeed())
	g.Expect(store.CreateBucket(ctx, ptrBucket)).To(Succeed())
	labels := map[string]string{"app": "writer"}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "writers", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		fl.Spec.LeaseDurationSeconds = 3
	}))).To(Succeed())
	// Two gateway replicas: each write goes to either, so only the
	// conditional writes on the store keep a key's order between them.
	routes := []gateway.Route{{Bucket: gwBucket, Namespace: ns, FencedLease: "writers"}}
	gw1, gw2 := startGateway(t, routes, o.rules), startGateway(t, routes, o.rules)

	pods := map[string]*corev1.Pod{}
	var mu sync.Mutex
	for i := range o.writers {
		name := fmt.Sprintf("w%d", i)
		pods[name] = readyPod(t, ns, name, labels, time.Duration(o.writers-i)*time.Minute)
	}
	waitLease(g, ns, "writers")
	grants := watchGrants(ctx, t, ns, "writers")

	dir := t.TempDir()
	vars := []string{"MODE=chaos", "LEASE=writers", "KEYS=3", "BUCKET=" + gwBucket, "GATEWAY=" + gw1.URL + "," + gw2.URL,
		"STORE=" + store.Endpoint, "STORE_ACCESS_KEY=" + store.AccessKey, "STORE_SECRET_KEY=" + store.SecretKey, "STORE_BUCKET=" + ptrBucket,
		"WRITES=" + strconv.Itoa(o.writes), "DURATION=" + o.duration.String()}
	procs := map[string]*proc{}
	start := func(name string) {
		p := startWriter(t, pods[name], append(vars, "HISTORY="+filepath.Join(dir, name+".jsonl"))...)
		mu.Lock()
		procs[name] = p
		mu.Unlock()
	}
	for name := range pods {
		start(name)
	}

	// The faults, until the writers are done.
	deadline := time.Now().Add(o.duration)
	deleted := 0
	var faults sync.WaitGroup
	for time.Now().Before(deadline) {
		time.Sleep(200*time.Millisecond + rand.N(400*time.Millisecond))
		mu.Lock()
		names := make([]string, 0, len(procs))
		for n := range procs {
			names = append(names, n)
		}
		mu.Unlock()
		switch r := rand.IntN(10); {
		case r < 4:
			// Pause a writer.
			p := procs[names[rand.IntN(len(names))]]
			if p.pause() == nil {
				faults.Go(func() {
					time.Sleep(100*time.Millisecond + rand.N(1400*time.Millisecond))
					_ = p.resume()
				})
			}
		case r < 9 || deleted >= 2:
			// The holder's containers stop being ready; ready again later.
			holder := currentHolder(ctx, ns, pods)
			if holder == nil {
				continue
			}
			g.Expect(testenv.SetContainersNotReady(ctx, env.Client, holder)).To(Succeed())
			faults.Go(func() {
				time.Sleep(500*time.Millisecond + rand.N(time.Second))
				_ = testenv.SetReady(context.Background(), env.Client, holder, time.Now())
			})
		default:
			// The holder pod is deleted: its token dies with it. A new pod
			// and process take its place.
			holder := currentHolder(ctx, ns, pods)
			if holder == nil {
				continue
			}
			deleted++
			g.Expect(env.Client.Delete(ctx, holder)).To(Succeed())
			name := fmt.Sprintf("r%d", deleted)
			mu.Lock()
			pods[name] = readyPod(t, ns, name, labels, 0)
			mu.Unlock()
			start(name)
		}
	}
	faults.Wait()
	for _, p := range procs {
		_ = p.resume()
		g.Expect(p.wait(o.duration + timeout)).To(Succeed())
	}
	cancel()

	run := chaosRun{grants: grants()}
	for name := range procs {
		run.history = append(run.history, readHistory(g, filepath.Join(dir, name+".jsonl"))...)
	}
	return run
}

// currentHolder is the pod that the Lease names as holder now.
func currentHolder(ctx context.Context, ns string, pods map[string]*corev1.Pod) *corev1.Pod {
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, keyOf(ns, "writers"), l); err != nil {
		return nil
	}
	for _, p := range pods {
		if string(p.UID) == l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] && l.Annotations[fencingv1alpha1.LeaseAnnotationState] == fencingv1alpha1.LeaseStateHeld {
			// A copy: the fault's goroutines read into it.
			return p.DeepCopy()
		}
	}
	return nil
}

// watchGrants records the committed grants of the Lease from now on; the
// function returned ends the watch and returns them.
func watchGrants(ctx context.Context, t *testing.T, ns, name string) func() []storage.Grant {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoordinationV1().Leases(ns).Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: name}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var grants []storage.Grant
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			l := ev.Object.(*coordinationv1.Lease)
			now := time.Now()
			f, _ := fence.ParseFence(l.Annotations[fencingv1alpha1.AnnotationFence])
			held := l.Annotations[fencingv1alpha1.LeaseAnnotationState] == fencingv1alpha1.LeaseStateHeld && f > 0
			uid := l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]
			mu.Lock()
			n := len(grants)
			if n > 0 && grants[n-1].Ended.IsZero() && (!held || grants[n-1].Fence != f) {
				grants[n-1].Ended = now
			}
			if held && (n == 0 || grants[n-1].Fence != f) {
				grants = append(grants, storage.Grant{Fence: f, HolderUID: uid, Seen: now})
			}
			mu.Unlock()
		}
	}()
	return func() []storage.Grant {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return grants
	}
}

func readHistory(g Gomega, path string) []storage.Attempt {
	f, err := os.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	var out []storage.Attempt
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<16), 1<<20)
	for s.Scan() {
		var a storage.Attempt
		g.Expect(json.Unmarshal(s.Bytes(), &a)).To(Succeed())
		out = append(out, a)
	}
	g.Expect(s.Err()).NotTo(HaveOccurred())
	return out
}

// summary counts attempts by way and result.
func summary(history []storage.Attempt) map[string]int {
	out := map[string]int{}
	for _, a := range history {
		out[a.Way+" "+a.Result]++
		if a.Kind != "put" && a.Kind != "" {
			out[a.Kind+" "+a.Result]++
		}
	}
	return out
}

// TestConcurrentWriters: 8 writer processes, at least 1,000 writes,
// random pauses and grants moving; the writers also delete (and so
// re-create), send path aliases, pause half way through a body, and replay
// fences3 operations at once and long after. The history has no
// violation: per key the accepted fences never go back (through the
// gateway, deletions included, and with fences3), the gateway accepted
// nothing from a pod that did not hold that fence, nor after the grant had
// ended, nor through an alias, and no operation was applied twice.
//
// $STORAGE_CHAOS_DURATION runs it longer (make chaos-storage).
func TestConcurrentWriters(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	o := chaosOptions{writers: 8, writes: 220, duration: 25 * time.Second}
	if d, err := time.ParseDuration(os.Getenv("STORAGE_CHAOS_DURATION")); err == nil && d > 0 {
		o.duration, o.writes = d, 1<<30
	}
	run := runChaos(t, o)
	s := summary(run.history)
	t.Logf("%d attempts %v; %d grants", len(run.history), s, len(run.grants))
	g.Expect(len(run.history)).To(BeNumerically(">=", 1000))
	g.Expect(len(run.grants)).To(BeNumerically(">=", 5), "the grant moved")
	for _, k := range []string{"gateway accepted", "gateway rejected", "pointer accepted", "pointer rejected",
		"alias rejected", "delete accepted", "slow accepted", "replay accepted"} {
		g.Expect(s[k]).To(BeNumerically(">", 0), k)
	}
	g.Expect(storage.Check(run.history, run.grants)).To(BeEmpty())
}

// TestBrokenGatewayIsCaught is the checker's sanity run: the same workload
// through a gateway whose fence checks are disabled (it admits every
// authenticated write and ignores the stored fence). The checker must find
// violations, or it could not find them in TestConcurrentWriters either.
func TestBrokenGatewayIsCaught(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	broken := &gateway.Rules{
		Admit: func(_ gateway.Write, _ gateway.Caller, fenceHeader string, _ gateway.Grant, _ error) gateway.Decision {
			f, _ := fence.ParseFence(fenceHeader)
			return gateway.Decision{Allowed: true, Reason: gateway.ReasonHolder, Fence: f}
		},
		CheckStored: func(_ gateway.Write, f int64, _ string) gateway.Decision {
			return gateway.Decision{Allowed: true, Reason: gateway.ReasonHolder, Fence: f}
		},
	}
	run := runChaos(t, chaosOptions{writers: 8, writes: 60, duration: 8 * time.Second, rules: broken})
	violations := storage.Check(run.history, run.grants)
	kinds := map[string]int{}
	for _, v := range violations {
		kinds[v.Kind]++
	}
	t.Logf("%d attempts %v; %d grants; violations found: %v", len(run.history), summary(run.history), len(run.grants), kinds)
	g.Expect(kinds[storage.NotHolder]).To(BeNumerically(">", 0))
	g.Expect(kinds[storage.FenceWentBack]).To(BeNumerically(">", 0))
}
