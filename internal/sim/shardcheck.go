package sim

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/invariant"
	"github.com/fencedlease/fencedlease/internal/record"
)

// shardChecker verifies, after every write of a run with shard sets, the
// invariants of every shard ("<set>/<key>"):
//
//   - at most one pod publishes a shard (annotation fencedlease.io/shards)
//     at any instant; a shard's published fences only grow, never go to
//     two pods, and a pod never regains a fence it lost (the rules of
//     internal/invariant's Publications, as the ShardChecker of
//     test/testenv feeds them on a real API server);
//   - every fence published to a pod was committed to that pod on the
//     shard's Lease before it was published;
//   - the committed fences of a shard's Lease grow with every grant, and
//     one fence goes to one pod (internal/invariant's Grants);
//   - under takeover Safe, no grant of a shard to another pod is
//     committed unless the previous owner's grant was revoked at least a
//     lease duration before, on the simulated clock: until then the
//     previous owner may still believe it owns the shard.
type shardChecker struct {
	pubs   *invariant.Publications
	grants *invariant.Grants
	// shards is what each pod (by UID) was last seen published to own.
	shards map[types.UID]map[string]int64
	// last is each shard's last committed grant, and revoked when its
	// revocation was applied (zero while it is not revoked).
	last    map[string]invariant.Grant
	revoked map[string]time.Time
	// immediate marks the shards whose Lease a replica that judged the
	// set Immediate wrote since the last commit (ShardsConfig.SpecChanges).
	immediate map[string]bool
	// grantsSeen, revocations and publications count what the run did.
	grantsSeen, revocations, publications int
}

func newShardChecker() *shardChecker {
	return &shardChecker{
		pubs: invariant.NewShardPublications(), grants: invariant.NewGrants(),
		shards: map[types.UID]map[string]int64{}, last: map[string]invariant.Grant{}, revoked: map[string]time.Time{},
		immediate: map[string]bool{},
	}
}

// afterWrite checks the change a write made to one object.
func (c *shardChecker) afterWrite(s *Sim, k objKey, cur, prev any, writer string) {
	switch k.kind {
	case "Pod":
		pod, _ := cur.(*corev1.Pod)
		old, _ := prev.(*corev1.Pod)
		c.checkPod(s, pod, old, writer)
	case "Lease":
		l, _ := cur.(*coordinationv1.Lease)
		old, _ := prev.(*coordinationv1.Lease)
		c.checkLease(s, l, old, writer)
	}
}

// setOf is the set a pod's shards are of: the set label the operator
// writes with them, else the set that selects it.
func setOf(pod *corev1.Pod) string {
	if set := pod.Labels[record.LabelShardSet]; set != "" {
		return set
	}
	return pod.Labels["app"]
}

// checkPod feeds the pod's publication, shard by shard, to the rules.
func (c *shardChecker) checkPod(s *Sim, pod, old *corev1.Pod, writer string) {
	if pod == nil {
		if old != nil {
			for key := range c.shards[old.UID] {
				c.pubs.Gone(string(old.UID) + "/" + key)
			}
			delete(c.shards, old.UID)
		}
		return
	}
	uid, set := pod.UID, setOf(pod)
	now, err := record.ParseShards(pod.Annotations[record.AnnotationShards])
	if err != nil {
		s.checker.fail(s, "pod %s carries shards that do not parse: %v (after a write by %s)", pod.Name, err, writer)
		return
	}
	was := c.shards[uid]
	for key := range was {
		if _, still := now[key]; !still {
			s.checker.report(s, writer, c.pubs.Observe(invariant.Publication{Pod: pod.Name, UID: string(uid) + "/" + key, Lease: set + "/" + key}))
		}
	}
	for key, fence := range now {
		shard := set + "/" + key
		if was[key] != fence {
			c.publications++
			if holder, ok := c.grants.Holder(shard, fence); !ok || holder != string(uid) {
				s.checker.fail(s, "pod %s was published fence %d of shard %s, which its Lease never committed to it (committed to %q) (after a write by %s)",
					pod.Name, fence, shard, holder, writer)
			}
		}
		s.checker.report(s, writer, c.pubs.Observe(invariant.Publication{Pod: pod.Name, UID: string(uid) + "/" + key, Lease: shard, Fence: fence, Raw: record.FormatFence(fence)}))
	}
	c.shards[uid] = now
}

// checkLease checks a write of a shard's Lease: a commit's fence against
// the grants before it, and under Safe against the previous owner's
// revocation.
func (c *shardChecker) checkLease(s *Sim, l, old *coordinationv1.Lease, writer string) {
	if l == nil {
		c.leaseDeleted(s, old, writer)
		return
	}
	if l.Labels[record.LabelShardSet] == "" {
		return
	}
	shard := l.Labels[record.LabelShardSet] + "/" + l.Labels[record.LabelShard]
	if s.judgedImmediate(l.Labels[record.LabelShardSet], writer) {
		// Safe is not checked for the next commit: a replica that has
		// not read the switch to Safe yet may replace a revoked grant at
		// once, and another replica then takes that grant for one never
		// committed.
		c.immediate[shard] = true
	}
	rec := record.ParseLease(l.Annotations)
	was := record.ParseLease(nil)
	if old != nil {
		was = record.ParseLease(old.Annotations)
	}
	switch {
	case rec.State == record.StateRevoked && was.State != record.StateRevoked:
		c.revoked[shard] = s.clock.Now()
		c.revocations++
	case rec.State == record.StateHeld && (was.State != record.StateHeld || was.Fence != rec.Fence || was.HolderUID != rec.HolderUID):
		g := invariant.Grant{Lease: shard, Fence: rec.Fence, Holder: rec.HolderUID, At: s.store.rev}
		if _, again := c.grants.Holder(shard, rec.Fence); !again {
			c.grantsSeen++
			c.checkSafe(s, shard, l, g, writer)
		}
		s.checker.report(s, writer, c.grants.Commit(g))
		c.last[shard] = g
		delete(c.immediate, shard)
		delete(c.revoked, shard)
	}
}

// checkSafe fails a commit of a shard to another pod under Safe unless the
// previous owner's grant was revoked a lease duration ago or more.
func (c *shardChecker) checkSafe(s *Sim, shard string, l *coordinationv1.Lease, g invariant.Grant, writer string) {
	prev, ok := c.last[shard]
	if !ok || prev.Holder == g.Holder || c.immediate[shard] {
		return
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	at, revoked := c.revoked[shard]
	switch {
	case !revoked:
		s.checker.fail(s, "shard %s committed to pod UID %s with fence %d under Safe, but the grant of pod UID %s (fence %d) was never revoked (after a write by %s)",
			shard, g.Holder, g.Fence, prev.Holder, prev.Fence, writer)
	case s.clock.Now().Before(at.Add(d)):
		s.checker.fail(s, "shard %s committed to pod UID %s with fence %d under Safe %s after the grant of pod UID %s (fence %d) was revoked, less than its lease duration %s (after a write by %s)",
			shard, g.Holder, g.Fence, s.clock.Now().Sub(at), prev.Holder, prev.Fence, d, writer)
	}
}

// judgedImmediate says whether the writer, a replica, judged the set
// Immediate: its last read of the set, made when its reconcile began,
// showed Immediate.
func (s *Sim) judgedImmediate(set, writer string) bool {
	var id int
	if _, err := fmt.Sscanf(writer, "r%d", &id); err != nil || id >= len(s.replicas) {
		return false
	}
	k := objKey{kind: "FencedShardSet", namespace: s.world.namespace, name: set}
	o, _ := s.store.at(k, s.replicas[id].setReads[set]).(*fencingv1alpha1.FencedShardSet)
	return o != nil && o.Spec.Takeover == fencingv1alpha1.TakeoverImmediate
}

// leaseDeleted ends the grant of a shard whose Lease was deleted. When its
// set still exists, the shard was removed from it, and the deletion ends
// the grant as a revocation does: a shard added back (or brought back by a
// replica that has not read the removal) is granted to another pod under
// Safe only a lease duration later. When the set is gone or being
// deleted, the shard ends with it: a set created again under the same name
// starts afresh.
func (c *shardChecker) leaseDeleted(s *Sim, old *coordinationv1.Lease, writer string) {
	if old == nil || old.Labels[record.LabelShardSet] == "" {
		return
	}
	set := old.Labels[record.LabelShardSet]
	shard := set + "/" + old.Labels[record.LabelShard]
	if s.judgedImmediate(set, writer) {
		c.immediate[shard] = true // deleted at once, as under Immediate
	}
	o, _ := s.store.headObj(objKey{kind: "FencedShardSet", namespace: old.Namespace, name: set}).(*fencingv1alpha1.FencedShardSet)
	if o == nil || o.DeletionTimestamp != nil || !metav1.IsControlledBy(old, o) {
		delete(c.last, shard)
		delete(c.revoked, shard)
		return
	}
	if _, revoked := c.revoked[shard]; !revoked && record.ParseLease(old.Annotations).State == record.StateHeld {
		c.revoked[shard] = s.clock.Now()
		c.revocations++
	}
}
