//go:build chaos

package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// shardSetLabel selects a shard set's candidates; the history's pod watch
// reads the shards of the pods that carry it.
const shardSetLabel = "chaos.fencedlease.io/shard-set"

// shardWorker is the service account of the shard sets' candidates: their
// own, apart from the FencedLeases' pods'.
const shardWorker = "shard-worker"

// shardSet is a FencedShardSet and its candidates, one per slot; a slot's
// pod is replaced (under a new name) when it is deleted.
type shardSet struct {
	shardSetConfig
	slots []*slot
}

// keys are the set's shard keys: "0" to Shards-1.
func (ss *shardSet) keys() []string {
	out := make([]string, 0, ss.Shards)
	for i := int32(0); i < ss.Shards; i++ {
		out = append(out, strconv.Itoa(int(i)))
	}
	return out
}

// shardObject is the protected ConfigMap of a shard.
func shardObject(set, key string) string { return set + "-obj-" + key }

// recordShards records the shards a pod's annotation shows, as the pod
// watch delivered it. An annotation that does not parse shows none (the
// ShardChecker reports it).
func recordShards(rec *Recorder, t watch.EventType, pod *corev1.Pod, set string) {
	shards := map[string]int64{}
	if t != watch.Deleted {
		if parsed, err := record.ParseShards(pod.Annotations[record.AnnotationShards]); err == nil {
			shards = parsed
		}
	}
	rec.HoldShards(pod.Name, pod.UID, set, shards, rec.Now())
}

// setupShards creates the shard sets' service account, its right to write
// ConfigMaps and read its pods (only the webhook stands in the way), and
// the FencedShardSets.
func (w *world) setupShards() error {
	if err := w.admin.Create(w.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: shardWorker}}); err != nil {
		return fmt.Errorf("create ServiceAccount %s: %w", shardWorker, err)
	}
	if err := w.admin.Create(w.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: shardWorker},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		},
	}); err != nil {
		return fmt.Errorf("create Role %s: %w", shardWorker, err)
	}
	if err := w.admin.Create(w.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: shardWorker},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: shardWorker},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: shardWorker}},
	}); err != nil {
		return fmt.Errorf("create RoleBinding %s: %w", shardWorker, err)
	}
	for _, c := range w.cfg.ShardSets {
		fss := &fencingv1alpha1.FencedShardSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: c.Name},
			Spec: fencingv1alpha1.FencedShardSetSpec{
				Selector:             metav1.LabelSelector{MatchLabels: map[string]string{shardSetLabel: c.Name}},
				Shards:               c.Shards,
				LeaseDurationSeconds: c.Duration,
				Takeover:             c.Takeover,
				JoinDelaySeconds:     ptr.To(c.JoinDelay),
			},
		}
		if err := w.admin.Create(w.ctx, fss); err != nil {
			return fmt.Errorf("create FencedShardSet %s: %w", c.Name, err)
		}
		ss := &shardSet{shardSetConfig: c}
		for i := 0; i < c.Pods; i++ {
			ss.slots = append(ss.slots, &slot{index: i})
		}
		w.shardSets = append(w.shardSets, ss)
	}
	return nil
}

// createShardObjects creates one protected ConfigMap per shard, as a
// break-glass user.
func (w *world) createShardObjects(breakGlass client.Client) error {
	for _, ss := range w.shardSets {
		for _, key := range ss.keys() {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: shardObject(ss.Name, key),
					Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: ss.Name, fencingv1alpha1.LabelShard: key}},
				Data: map[string]string{"value": ""},
			}
			if err := breakGlass.Create(w.ctx, cm); err != nil {
				return fmt.Errorf("create ConfigMap %s of shard %s: %w", cm.Name, ShardName(ss.Name, key), err)
			}
		}
	}
	return nil
}

// startShardPods creates every shard slot's first pod and its process,
// spread over the nodes.
func (w *world) startShardPods() error {
	for _, ss := range w.shardSets {
		for _, s := range ss.slots {
			if err := w.replaceShardPod(ss, s, w.cfg.Nodes[(s.index+1)%len(w.cfg.Nodes)]); err != nil {
				return err
			}
		}
	}
	return nil
}

// replaceShardPod creates the slot's next pod on the node, ready since now,
// and starts its shard process.
func (w *world) replaceShardPod(ss *shardSet, s *slot, node string) error {
	w.mu.Lock()
	s.gen++
	name := fmt.Sprintf("%s-s%d-g%d", ss.Name, s.index, s.gen)
	w.mu.Unlock()
	pod, err := testenv.CreatePod(w.ctx, w.admin, testenv.Pod{Namespace: w.ns, Name: name,
		Labels: map[string]string{shardSetLabel: ss.Name}, Node: node, ServiceAccount: shardWorker})
	if err != nil {
		return err
	}
	if err := testenv.SetReady(w.ctx, w.admin, pod, time.Now()); err != nil {
		return err
	}
	c, err := w.podClient(pod)
	if err != nil {
		return err
	}
	w.mu.Lock()
	s.pod = pod.DeepCopy()
	w.mu.Unlock()
	p := newShardProcess(w, ss, pod, c)
	w.procs.Add(1)
	go func() {
		defer w.procs.Done()
		p.run()
	}()
	return nil
}

// readFinalShards reads every shard's object once the processes have
// stopped.
func (w *world) readFinalShards() error {
	for _, ss := range w.shardSets {
		for _, key := range ss.keys() {
			o := shardObject(ss.Name, key)
			call := w.rec.Now()
			cm := &corev1.ConfigMap{}
			if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: o}, cm); err != nil {
				return fmt.Errorf("read ConfigMap %s of shard %s: %w", o, ShardName(ss.Name, key), err)
			}
			fence := record.FenceOf(cm.Annotations[fencingv1alpha1.AnnotationFence])
			w.rec.Final(Read{Object: o, Fence: fence, Value: cm.Data["value"], ResourceVersion: cm.ResourceVersion, Call: call, Return: w.rec.Now()})
		}
	}
	return nil
}

// unowned lists the shards ("<set>/<key>") that no candidate pod's
// annotation publishes.
func (w *world) unownedShards() []string {
	var pods corev1.PodList
	if err := w.admin.List(w.ctx, &pods, client.InNamespace(w.ns)); err != nil {
		return []string{err.Error()}
	}
	owned := map[string]bool{}
	for _, p := range pods.Items {
		set := p.Labels[shardSetLabel]
		if set == "" {
			continue
		}
		shards, err := record.ParseShards(p.Annotations[record.AnnotationShards])
		if err != nil {
			continue
		}
		for key := range shards {
			owned[ShardName(set, key)] = true
		}
	}
	var out []string
	for _, ss := range w.shardSets {
		for _, key := range ss.keys() {
			if !owned[ShardName(ss.Name, key)] {
				out = append(out, ShardName(ss.Name, key))
			}
		}
	}
	return out
}

// describeUnowned says, for a violation message, what the API server holds
// for the shards no pod owns: each set's status, the shards' Leases and the
// candidates with their shards.
func (w *world) describeUnowned(unowned []string) string {
	var b strings.Builder
	sets := map[string]bool{}
	for _, s := range unowned {
		set, key, _ := strings.Cut(s, "/")
		sets[set] = true
		l := &coordinationv1.Lease{}
		if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: record.ShardLeaseName(set, key)}, l); err != nil {
			fmt.Fprintf(&b, "shard %s: Lease: %v\n", s, err)
			continue
		}
		fmt.Fprintf(&b, "shard %s: Lease rv %s holder %s annotations %v\n", s, l.ResourceVersion, ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations)
	}
	names := make([]string, 0, len(sets))
	for s := range sets {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, set := range names {
		fss := &fencingv1alpha1.FencedShardSet{}
		if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: set}, fss); err != nil {
			fmt.Fprintf(&b, "FencedShardSet %s: %v\n", set, err)
			continue
		}
		fmt.Fprintf(&b, "FencedShardSet %s: status %+v\n", set, fss.Status)
		var pods corev1.PodList
		if err := w.admin.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{shardSetLabel: set}); err == nil {
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "  pod %s phase %s containersReady %v node %q deleting %v shards %q\n", p.Name, p.Status.Phase,
					containersReady(&p), p.Spec.NodeName, p.DeletionTimestamp != nil, p.Annotations[record.AnnotationShards])
			}
		}
	}
	return b.String()
}

// shardMoves is the sum of the sets' status.moves, as the operator counts
// them.
func (w *world) shardMoves() string {
	var parts []string
	for _, ss := range w.shardSets {
		fss := &fencingv1alpha1.FencedShardSet{}
		if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: ss.Name}, fss); err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", ss.Name, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s moves=%d owned=%d/%d", ss.Name, fss.Status.Moves, fss.Status.Owned, fss.Status.Shards))
	}
	return "shard sets' status: " + strings.Join(parts, ", ")
}

func containersReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// recordShardLeases watches the shards' Leases for the history: the grant
// each one has committed (ViaStatus, the record the fencing webhook trusts
// for a shard), in the order the Lease took them. follow reads them as it
// reads the rest of the history; where it cannot (the HA control plane's
// etcd reader knows no Leases), an API server's watch does.
func (w *world) recordShardLeases() error {
	handle := func(t watch.EventType, o runtime.Object) {
		l := o.(*coordinationv1.Lease)
		set, key := l.Labels[record.LabelShardSet], l.Labels[record.LabelShard]
		if set == "" || key == "" {
			return
		}
		g := record.ParseLease(l.Annotations)
		if t == watch.Deleted || !g.Held() {
			w.rec.StatusHolder(ShardName(set, key), "", "", 0, w.rec.Now())
			return
		}
		w.rec.StatusHolder(ShardName(set, key), ptr.Deref(l.Spec.HolderIdentity, ""), types.UID(g.HolderUID), g.Fence, w.rec.Now())
	}
	gap := func() { w.rec.Gap("shard-leases") }
	err := w.cp.follow(w.ctx, w.ns, &coordinationv1.LeaseList{}, gap, handle)
	if err == nil || !strings.Contains(err.Error(), "unknown kind") {
		return err
	}
	c, err := client.NewWithWatch(w.env.Config, client.Options{Scheme: w.env.Client.Scheme()})
	if err != nil {
		return err
	}
	return testenv.Follow(w.ctx, c, w.ns, &coordinationv1.LeaseList{}, gap, handle)
}
