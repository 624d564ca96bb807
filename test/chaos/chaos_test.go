//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// breakGlassUser creates the protected objects before anyone holds a fence.
const breakGlassUser = "chaos-break-glass"

// TestChaos is the chaos run: see the package doc. It fails on any
// violation, and when it explored too little to mean anything (too few
// handoffs or writes, no stale or impostor write fenced off, a fault kind
// never injected).
func TestChaos(t *testing.T) {
	g := NewWithT(t)
	cfg, err := loadConfig()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("chaos seed %d, %s of faults (CHAOS_SEED=%d replays the fault schedule)", cfg.Seed, cfg.Duration, cfg.Seed)

	testenv.SetLogger()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp, err := startControlPlane(ctx, t)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("control plane: %s", cp.name)
	env := cp.env
	operatorConfig, err := testenv.OperatorConfig(ctx, env)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(testenv.InstallPolicies(ctx, env.Client, testenv.PolicyFiles()...)).To(Succeed())

	rec := NewRecorder()
	w := &world{cfg: cfg, ctx: ctx, env: env, cp: cp, admin: env.Client, cleanup: cp.cleanup, rec: rec, stop: make(chan struct{}), lost: map[string]bool{}}
	g.Expect(w.setup()).To(Succeed())
	checker, err := testenv.WatchHoldersWith(ctx, w.ns, cp.follow)
	g.Expect(err).NotTo(HaveOccurred())
	shardChecker, err := testenv.WatchShardsWith(ctx, w.ns, cp.follow)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(recordHistory(ctx, cp.follow, w.ns, rec)).To(Succeed())
	g.Expect(w.recordShardLeases()).To(Succeed())

	ops := newOperators(ctx, operatorConfig, w.ns, &env.WebhookInstallOptions,
		setup.WebhookOptions{OperatorUsers: []string{testenv.OperatorUser}, BreakGlassUsers: []string{breakGlassUser}}, rec, cfg.Seed)
	ops.configFor = cp.operatorConfig
	view := newWebhookView(rec)
	ops.registerPrimary = view.register
	g.Expect(ops.startPrimary()).To(Succeed())
	t.Cleanup(ops.stop)
	if cp.ready != nil {
		g.Expect(cp.ready(ctx)).To(Succeed())
	}
	g.Expect(w.createObjects(cp.breakGlass)).To(Succeed())
	if fencingOff() {
		t.Log("CHAOS_FENCING=off: the fencing webhook is removed; this run must report violations")
		g.Expect(disableFencing(ctx, cp)).To(Succeed())
	}
	g.Expect(w.startPods()).To(Succeed())
	g.Eventually(func() []string { return w.unheld() }).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).
		Should(BeEmpty(), "every lease has a holder before the faults start")
	g.Eventually(func() []string { return w.unownedShards() }).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).
		Should(BeEmpty(), "every shard has an owner before the faults start")

	progress := w.progress(t, 30*time.Second)
	err = injectAll(ctx, w, ops, time.Now().Add(cfg.Duration))
	if err == nil {
		// Every fault has healed: every lease is held again, a deleted
		// Lease too (re-created once its grant was over).
		g.Eventually(func() []string { return w.unheld() }).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).
			Should(BeEmpty(), func() string { return "every lease has a holder again once the faults healed:\n" + w.describeUnheld() })
	}
	// Liveness of the shards: once the faults healed, every shard is owned
	// again (a Safe move waits out the lease; a join delay may pass first).
	var unowned []string
	if err == nil {
		unowned = w.awaitShardsOwned(30 * time.Second)
	}
	close(w.stop)
	w.procs.Wait()
	progress()
	g.Expect(err).NotTo(HaveOccurred(), "injecting a fault failed")

	g.Expect(w.readFinal()).To(Succeed())
	// The watches deliver the last versions a moment after the reads.
	g.Eventually(func() []string { return w.behind() }).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(BeEmpty())
	h := rec.History()
	moves := w.shardMoves()

	dir, keep := artifacts(t)
	result, err := Check(h, CheckOptions{Window: cfg.Window, LinearizabilityTimeout: 5 * time.Minute,
		Visualization: filepath.Join(dir, "porcupine.html")})
	g.Expect(err).NotTo(HaveOccurred())
	result.Violations = append(result.Violations, checker.Violations()...)
	result.Violations = append(result.Violations, shardChecker.Violations()...)
	if len(unowned) > 0 {
		result.Violations = append(result.Violations, fmt.Sprintf("shards %v have no owner 30s after the faults healed:\n%s", unowned, w.describeUnowned(unowned)))
	}
	result.Violations = append(result.Violations, w.checkServices()...)
	for _, gap := range []string{"pods", "fencedleases", "shard-leases", "*"} {
		if h.Gaps[gap] {
			result.Violations = append(result.Violations, "the watch of "+gap+" lost events: the history is incomplete")
		}
	}
	s := Summarize(cfg.Seed, cfg.Duration, h, result)
	lags := view.lags(h, cfg.Window)
	t.Log(s.String())
	t.Log(lags)
	t.Log(moves)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		g.Expect(os.WriteFile(path, []byte(s.String()+"  "+lags+"\n  "+moves+"\n"), 0o600)).To(Succeed())
	}
	if len(result.Violations) > 0 || keep {
		g.Expect(WriteHistory(h, filepath.Join(dir, "history.json"))).To(Succeed())
		t.Logf("history and porcupine visualisation (if it found a violation) in %s", dir)
	}
	for _, v := range result.Violations {
		t.Errorf("violation: %s", v)
	}
	if len(result.Violations) == 0 && !keep {
		_ = os.RemoveAll(dir)
	}

	// A run that explored too little proves nothing.
	g.Expect(s.Handoffs).To(BeNumerically(">=", cfg.MinHandoffs), "too few handoffs")
	g.Expect(s.Attempts).To(BeNumerically(">=", cfg.MinAttempts), "too few writes")
	g.Expect(s.Accepted).To(BeNumerically(">", 0), "no write was accepted")
	g.Expect(s.BySource["stale"]).To(BeNumerically(">", 0), "no stale write")
	g.Expect(s.StaleRejections()).To(BeNumerically(">", 0), "no stale or impostor write was fenced off")
	g.Expect(s.BySource["impostor/not_holder"]).To(BeNumerically(">", 0), "no impostor write was refused")
	g.Expect(s.BeliefHandoffs).To(BeNumerically(">=", cfg.MinBeliefHandoffs), "no renewal Holder handoff: no holder process's belief passed to another pod")
	g.Expect(s.Released).To(BeNumerically(">=", cfg.MinReleases), "no grant was released")
	g.Expect(s.StatusAttacks).To(BeNumerically(">", 0), "no status write tried to change a protected object's metadata")
	g.Expect(s.Shards.Accepted).To(BeNumerically(">", 0), "no shard write was accepted")
	g.Expect(s.Shards.BySource["stale"]).To(BeNumerically(">", 0), "no stale shard write")
	g.Expect(s.Shards.StaleRejections()).To(BeNumerically(">", 0), "no stale or impostor shard write was fenced off")
	g.Expect(s.Shards.Moves).To(BeNumerically(">=", cfg.MinShardMoves), "too few shard moves")
	for _, k := range faultKinds {
		g.Expect(s.Faults).To(HaveKey(k.name), "fault %s never injected", k.name)
	}
	for _, k := range cp.faultKinds {
		g.Expect(s.Faults).To(HaveKey(k), "fault %s never injected", k)
	}
}

// artifacts is where a failing run leaves its history and visualisation:
// $CHAOS_ARTIFACTS (kept, with the history, even when the run passes) or a
// new temporary directory (removed when the run passes).
func artifacts(t *testing.T) (string, bool) {
	t.Helper()
	keep := os.Getenv("CHAOS_ARTIFACTS") != ""
	dir, err := ArtifactDir()
	if err != nil {
		t.Fatalf("artifact directory: %v", err)
	}
	return dir, keep
}

// unheld lists the leases without a holder published to its pod.
func (w *world) unheld() []string {
	var pods corev1.PodList
	if err := w.admin.List(w.ctx, &pods, client.InNamespace(w.ns)); err != nil {
		return []string{err.Error()}
	}
	held := map[string]bool{}
	for _, p := range pods.Items {
		if p.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
			held[p.Annotations[fencingv1alpha1.AnnotationLease]] = true
		}
	}
	var out []string
	for _, l := range w.leases {
		if !held[l.Name] {
			out = append(out, l.Name)
		}
	}
	return out
}

// behind lists the objects whose watch has not yet delivered the version
// the final read returned.
func (w *world) behind() []string {
	w.rec.mu.Lock()
	final := append([]Read(nil), w.rec.h.Final...)
	w.rec.mu.Unlock()
	var out []string
	for _, r := range final {
		if w.rec.LastVersion(r.Object) != r.ResourceVersion {
			out = append(out, r.Object)
		}
	}
	return out
}

// progress logs how far the run got every interval; the returned function
// stops it.
func (w *world) progress(t *testing.T, every time.Duration) func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				w.rec.mu.Lock()
				n, faults := len(w.rec.h.Attempts), 0
				for _, f := range w.rec.h.Faults {
					faults += f
				}
				w.rec.mu.Unlock()
				t.Logf("%s: %d write attempts, %d faults", w.rec.Now().Round(time.Second), n, faults)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// describeUnheld says, for a failure message, what the API server holds for
// each lease without a holder: the FencedLease's status, its Lease and its
// pods' publications, and what the recreate fault did to the FencedLease.
func (w *world) describeUnheld() string {
	var b strings.Builder
	for _, name := range w.unheld() {
		fl := &fencingv1alpha1.FencedLease{}
		if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, fl); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", name, err)
			w.describeRecreates(&b, name)
			continue
		}
		fmt.Fprintf(&b, "FencedLease %s: fence %d, holder %v, generation %d, uid %s, deleting %v\n", name, fl.Status.Fence, fl.Status.Holder, fl.Generation, fl.UID, fl.DeletionTimestamp != nil)
		for _, c := range fl.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		w.describeRecreates(&b, name)
		l := &coordinationv1.Lease{}
		if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, l); err != nil {
			fmt.Fprintf(&b, "  Lease: %v\n", err)
		} else {
			fmt.Fprintf(&b, "  Lease rv %s holder %s annotations %v finalizers %v deleting %v\n", l.ResourceVersion, ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations, l.Finalizers, l.DeletionTimestamp != nil)
		}
		var pods corev1.PodList
		if err := w.admin.List(w.ctx, &pods, client.InNamespace(w.ns)); err == nil {
			for _, p := range pods.Items {
				if p.Labels[fencingv1alpha1.LabelLease] == name || p.Annotations[fencingv1alpha1.AnnotationLease] == name {
					ready := false
					for _, c := range p.Status.Conditions {
						if c.Type == corev1.ContainersReady {
							ready = c.Status == corev1.ConditionTrue
						}
					}
					fmt.Fprintf(&b, "  pod %s phase %s containersReady %v node %q deleting %v annotations %v\n", p.Name, p.Status.Phase, ready, p.Spec.NodeName, p.DeletionTimestamp != nil, p.Annotations)
				}
			}
		}
	}
	return b.String()
}

// describeRecreates writes, for a failure message, the recreate fault's
// events on the FencedLease (the only deletes of FencedLeases in the run):
// each delete and create with the UIDs, at the time each was logged.
func (w *world) describeRecreates(b *strings.Builder, name string) {
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	for _, f := range w.rec.h.FaultLog {
		if strings.HasPrefix(f.Kind, faultRecreate) && (f.Target == name || strings.HasPrefix(f.Target, name+" ")) {
			fmt.Fprintf(b, "  at %s %s %s\n", f.At.Round(time.Millisecond), f.Kind, f.Target)
		}
	}
}

// awaitShardsOwned waits up to d for every shard to be published to a pod
// again, and returns those still without an owner then: a violation of
// liveness, which the caller reports.
func (w *world) awaitShardsOwned(d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		unowned := w.unownedShards()
		if len(unowned) == 0 || time.Now().After(deadline) || w.ctx.Err() != nil {
			return unowned
		}
		sleep(w.ctx, 100*time.Millisecond)
	}
}
