package sim

import (
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// settleRounds bounds the settling phase: a round is a second of simulated
// time. A Safe takeover waits a lease duration (10 s), a restarted operator
// measures its load for 20 s before it grants a FencedLease a previous
// process left waiting, and a pending grant is superseded after 2 s.
const settleRounds = 120

// settle is the end of a run: the faults stop (no lost request or reply, no
// crash, no pause, no change of the world), every replica's caches catch
// up, and rounds of one simulated second follow, in which every
// FencedLease is reconciled and every process learns and renews. Within
// settleRounds, and for three rounds in a row, every FencedLease must be
// settled (unsettled): held and published when it has an eligible
// candidate, with its pods' holder conditions in line, and none left half
// deleted. A grant that never comes is a violation of liveness, as one
// that comes twice is of safety.
func (s *Sim) settle() {
	s.cfg.LostReplies, s.cfg.LostRequests, s.cfg.Crashes = 0, 0, 0
	for _, r := range s.replicas {
		r.pausedUntil = 0
	}
	for _, p := range s.procs {
		p.paused = false
	}
	s.tracef("step %d: the faults stop; the run settles", s.step)
	stable, last := 0, []string(nil)
	for round := 0; round < s.settleRounds() && len(s.checker.violations) == 0; round++ {
		s.catchUpAll()
		s.drainClients()
		if s.shards != nil && s.shards.cfg.SpecChanges {
			s.shards.collectGarbage()
		}
		r := s.replicas[round%len(s.replicas)]
		s.beatToEnd(r)
		s.catchUpAll()
		for _, name := range s.settleNames() {
			for range 3 {
				before := s.store.rev
				s.reconcileToEnd(r, name)
				if s.store.rev == before {
					break
				}
			}
		}
		s.catchUpAll()
		s.world.learnAll()
		s.clock.SetTime(s.clock.Now().Add(time.Second))
		if last = s.unsettledAll(); len(last) == 0 {
			if stable++; stable >= 3 {
				s.stats.Settled++
				return
			}
			continue
		}
		stable = 0
	}
	if len(s.checker.violations) == 0 {
		s.checker.fail(s, "liveness: %d s after the faults stopped: %v", s.settleRounds(), last)
	}
}

// catchUpAll brings every cache and view to now.
func (s *Sim) catchUpAll() {
	for _, r := range s.replicas {
		for _, k := range s.kinds {
			r.views[k] = s.store.rev
		}
	}
	for _, h := range s.hooks {
		h.view = s.store.rev
	}
	for _, p := range s.procs {
		p.view = s.store.rev
	}
}

// drainClients runs every request in flight to its end.
func (s *Sim) drainClients() {
	for len(s.clients) > 0 {
		s.finish(s.clients[0])
	}
}

// finish runs an actor's calls to its end, and those of the functions it
// runs at once.
func (s *Sim) finish(root *actor) {
	for a := root.runner(); a.next != nil; a = root.runner() {
		c := a.next
		s.tracef("step %d: %s", s.step, c.desc)
		err := c.exec()
		if err != nil {
			s.tracef("  -> %s", firstLine(err.Error()))
		}
		c.reply <- err
		s.await(a)
	}
}

// reconcileToEnd runs one whole reconcile of a FencedLease on a replica,
// after the one it may be running already.
func (s *Sim) reconcileToEnd(r *replica, name string) {
	key := types.NamespacedName{Namespace: s.world.namespace, Name: name}
	if a := r.running[key]; a != nil {
		s.finish(a)
	}
	a := &actor{rep: r, key: key, calls: make(chan *call), done: make(chan struct{})}
	r.running[key] = a
	s.stats.Reconciles++
	rec := r.rec
	go func() {
		defer close(a.done)
		_, _ = rec.Reconcile(withActor(a), reconcileRequest(key))
	}()
	s.await(a)
	s.finish(a)
}

// beatToEnd renews the heartbeat of a replica that has one, to the end.
func (s *Sim) beatToEnd(r *replica) {
	b, ok := r.rec.(Beater)
	if !ok {
		return
	}
	if a := r.running[beatKey]; a != nil {
		s.finish(a)
	}
	a := &actor{rep: r, key: beatKey, calls: make(chan *call), done: make(chan struct{})}
	r.running[beatKey] = a
	go func() {
		defer close(a.done)
		_ = b.Beat(withActor(a))
	}()
	s.await(a)
	s.finish(a)
}

// learnAll lets every process of a pod that runs learn and renew.
func (w *world) learnAll() {
	var list corev1.PodList
	if err := w.sim.store.list(w.sim.store.rev, &list, client.InNamespace(w.namespace)); err != nil {
		return
	}
	for i := range list.Items {
		pod := &list.Items[i]
		p := w.sim.procs.of(pod.UID)
		if holder.Terminated(pod) || pod.Status.Phase == corev1.PodFailed {
			p.stop()
			continue
		}
		w.learn(pod, p)
	}
}

// unsettled says what keeps the world from being settled, if anything.
func (s *Sim) unsettled() []string {
	var out []string
	var fls fencingv1alpha1.FencedLeaseList
	if err := s.store.list(s.store.rev, &fls, client.InNamespace(s.world.namespace)); err != nil {
		return []string{err.Error()}
	}
	var pods corev1.PodList
	if err := s.store.list(s.store.rev, &pods, client.InNamespace(s.world.namespace)); err != nil {
		return []string{err.Error()}
	}
	for i := range fls.Items {
		fl := &fls.Items[i]
		if fl.DeletionTimestamp != nil {
			out = append(out, fmt.Sprintf("FencedLease %s is still being deleted", fl.Name))
			continue
		}
		out = append(out, s.unsettledLease(fl, &fls, pods.Items)...)
	}
	sort.Strings(out)
	return out
}

// unsettledLease checks one FencedLease: with an eligible candidate, one of
// them holds a committed grant, published to it and recorded in the
// status; only the published holder has its holder condition True.
func (s *Sim) unsettledLease(fl *fencingv1alpha1.FencedLease, all *fencingv1alpha1.FencedLeaseList, pods []corev1.Pod) []string {
	var out []string
	eligible := map[types.UID]bool{}
	for i := range pods {
		pod := &pods[i]
		if !selects(fl, pod) {
			continue
		}
		overlap := false
		for j := range all.Items {
			if other := &all.Items[j]; other.Name != fl.Name && selects(other, pod) {
				overlap = true
			}
		}
		node := &corev1.Node{}
		if s.store.get(s.store.rev, types.NamespacedName{Name: pod.Spec.NodeName}, node) != nil {
			node = nil
		}
		if holder.NewCandidate(pod, overlap, node).Eligible() {
			eligible[pod.UID] = true
		}
	}
	l := &coordinationv1.Lease{}
	if s.store.get(s.store.rev, client.ObjectKeyFromObject(fl), l) != nil {
		l = nil
	}
	var holderUID types.UID
	var fence int64
	if l != nil && l.Annotations[fencingv1alpha1.LeaseAnnotationState] == fencingv1alpha1.LeaseStateHeld {
		holderUID = types.UID(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID])
		fence = record.FenceOf(l.Annotations[fencingv1alpha1.AnnotationFence])
	}
	if len(eligible) > 0 && !fl.Spec.Paused {
		st := fl.Status
		switch {
		case holderUID == "" || !eligible[holderUID]:
			out = append(out, fmt.Sprintf("FencedLease %s has %d eligible candidates but no eligible holder", fl.Name, len(eligible)))
		case st.Holder == nil || st.Holder.PodUID != holderUID || st.Fence != fence:
			out = append(out, fmt.Sprintf("FencedLease %s: the status does not record the grant with fence %d", fl.Name, fence))
		}
	}
	for i := range pods {
		pod := &pods[i]
		if pod.Labels[fencingv1alpha1.LabelLease] != fl.Name {
			continue
		}
		lease, published := publishedOf(pod)
		isHolder := lease == fl.Name && published == fence && pod.UID == holderUID && fence > 0
		if holderUID == pod.UID && eligible[pod.UID] && !fl.Spec.Paused && !isHolder {
			out = append(out, fmt.Sprintf("FencedLease %s: pod %s holds fence %d, not published to it", fl.Name, pod.Name, fence))
		}
		if !hasGate(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		want := corev1.ConditionFalse
		if isHolder {
			want = corev1.ConditionTrue
		}
		if got := conditionStatus(pod, fencingv1alpha1.ConditionHolder); got != want {
			out = append(out, fmt.Sprintf("FencedLease %s: pod %s has condition %s=%q, want %q", fl.Name, pod.Name,
				fencingv1alpha1.ConditionHolder, got, want))
		}
	}
	return out
}

// publishedOf is the FencedLease and fence a pod is published as holder of.
func publishedOf(p *corev1.Pod) (string, int64) { return published(p) }

func selects(fl *fencingv1alpha1.FencedLease, pod *corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(&fl.Spec.Selector)
	return err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels))
}

func hasGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == fencingv1alpha1.ConditionHolder {
			return true
		}
	}
	return false
}
