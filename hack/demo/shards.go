package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	shardApp   = "shard-worker"
	shardSet   = "orders"
	shardCount = 64
	// shardLease is short so that the Safe waits are short.
	shardLease = 6
	// shardJoinDelay keeps a rolling update from moving every shard twice.
	shardJoinDelay = 20
)

// shardsScene is make demo-shards: three pods share 64 fenced shards; a pod
// is deleted, a node paused past the shards' lease, a rolling update runs.
func (d *demo) shardsScene(o options) error {
	if len(d.realNodes) < 2 {
		return fmt.Errorf("the running cluster has %d real nodes, the demo needs two: make cluster-down, then make demo-shards", len(d.realNodes))
	}
	d.step("Installing the operator from the Helm chart, in the cluster")
	if err := d.installInCluster(o); err != nil {
		return err
	}
	s := &shardDemo{demo: d, last: map[string]shardGrant{}, moves: map[string]int{}, unowned: map[string]time.Time{}}
	for _, step := range []func() error{s.setUp, s.firstGrants, s.firstWrites, s.deletePod, s.pauseNode, s.rollingUpdate} {
		if err := step(); err != nil {
			d.dump()
			return err
		}
	}
	s.summary()
	return nil
}

// shardDemo follows the shards' grants, as the Leases record them.
type shardDemo struct {
	*demo
	checker *testenv.ShardChecker

	mu    sync.Mutex
	quiet bool
	// last is each shard's last committed grant; moves counts each shard's
	// moves since counting started; unowned is when each shard that has no
	// committed grant lost it; longest is the longest such gap.
	last     map[string]shardGrant
	moves    map[string]int
	unowned  map[string]time.Time
	longest  time.Duration
	total    int
	accepted int
	rejected int
}

type shardGrant struct {
	pod   string
	fence int64
}

func (s *shardDemo) setUp() error {
	d := s.demo
	d.step("A sharded workload: a FencedShardSet of 64 shards and a 3-replica Deployment")
	if err := s.namespace(); err != nil {
		return err
	}
	set := &fencingv1alpha1.FencedShardSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: shardSet},
		Spec: fencingv1alpha1.FencedShardSetSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": shardApp}}, Shards: shardCount,
			LeaseDurationSeconds: shardLease, Takeover: fencingv1alpha1.TakeoverSafe, JoinDelaySeconds: ptr.To[int32](shardJoinDelay),
		},
	}
	if err := d.c.Create(d.ctx, set); err != nil {
		return fmt.Errorf("create FencedShardSet %s/%s: %w", d.ns, shardSet, err)
	}
	d.say("FencedShardSet %s: shards 0 to %d over the pods labelled app=%s; lease %ds, takeover Safe, join delay %ds.", shardSet, shardCount-1, shardApp, shardLease, shardJoinDelay)
	explain("Each shard is a fenced lease of its own: a Lease %s-<shard>, one owner pod at a time, a fence that grows with every move.", shardSet)
	explain("A pod's shards and their fences are in its annotation %s, and in its file %s.", fencingv1alpha1.AnnotationShards, fencingv1alpha1.ShardsFile)
	checker, err := testenv.WatchShards(d.ctx, d.cl.RestConfig, d.ns)
	if err != nil {
		return err
	}
	s.checker = checker
	if err := s.followLeases(); err != nil {
		return err
	}
	if err := d.c.Create(d.ctx, shardDeployment(d.ns, "1")); err != nil {
		return fmt.Errorf("create Deployment %s/%s: %w", d.ns, shardApp, err)
	}
	d.say("Deployment %s: 3 replicas on the real nodes.", shardApp)
	explain("An object of shard k carries the labels %s=%s and %s=k: only the owner of shard k may write it,", fencingv1alpha1.LabelProtectedBy, shardSet, fencingv1alpha1.LabelShard)
	explain("and only with the shard's current fence.")
	return nil
}

// namespace creates the scene's namespace, where the pods may write
// ConfigMaps: only fencing stands in their way.
func (s *shardDemo) namespace() error {
	d := s.demo
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "demo-shards-", Labels: map[string]string{demoLabel: "true"}}}
	if err := d.c.Create(d.ctx, ns); err != nil {
		return fmt.Errorf("create the demo namespace: %w", err)
	}
	d.ns = ns.Name
	d.say("Namespace %s.", d.ns)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: d.ns, Name: "default"}}}
	for _, o := range []client.Object{role, binding} {
		if err := d.c.Create(d.ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// shardContainer runs fence shards: one command per shard the pod owns, as
// the kubelet projects them into /etc/fencedlease/shards, stopped when the
// shard goes.
const shardContainer = "worker"

const shardWorkScript = `exec /fence shards --grace-period 2s --poll-interval 1s -- /bin/sh -c '` +
	`echo "shard $FENCE_SHARD: working with fence $FENCE_TOKEN"; trap "exit 0" TERM; while :; do sleep 1; done'`

// workerSays waits until the pod's worker has written want.
func (s *shardDemo) workerSays(pod *corev1.Pod, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		log, err := s.cl.ContainerLog(pod.Spec.NodeName, pod, shardContainer)
		if err == nil && strings.Contains(log, want) {
			s.say("%s's worker: %q", pod.Name, want)
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the worker of pod %s did not write %q in %s: %w", pod.Name, want, timeout, err)
			}
			return fmt.Errorf("the worker of pod %s did not write %q in %s (its last line: %q)", pod.Name, want, timeout, lastLine(log))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func shardDeployment(ns, version string) *appsv1.Deployment {
	spec := corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](2),
		Containers: []corev1.Container{{Name: shardContainer, Image: "fencedlease.local/workload:dev", ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", shardWorkScript}}},
	}
	cluster.OnRealNode(&spec)
	spec.HostNetwork = false
	labels := map[string]string{"app": shardApp, fencingv1alpha1.LabelInject: "true"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: shardApp},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": shardApp}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"demo/version": version}},
				Spec:       spec,
			},
		},
	}
}

// followLeases prints every move of a shard, with its fences, as the
// shards' Leases record the commits.
func (s *shardDemo) followLeases() error {
	c, err := client.NewWithWatch(s.cl.RestConfig, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return err
	}
	s.quiet = true
	return testenv.Follow(s.ctx, c, s.ns, &coordinationv1.LeaseList{}, func() {}, func(t watch.EventType, o runtime.Object) {
		if t != watch.Deleted {
			s.observe(o.(*coordinationv1.Lease))
		}
	})
}

func (s *shardDemo) observe(l *coordinationv1.Lease) {
	key := l.Labels[record.LabelShard]
	if l.Labels[record.LabelShardSet] != shardSet || key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := record.ParseLease(l.Annotations)
	now := time.Now()
	if !rec.Held() {
		if _, ok := s.unowned[key]; !ok {
			s.unowned[key] = now
		}
		return
	}
	g := shardGrant{pod: ptr.Deref(l.Spec.HolderIdentity, ""), fence: rec.Fence}
	was, had := s.last[key]
	if had && was.fence == g.fence {
		return
	}
	s.last[key] = g
	gap := time.Duration(0)
	if since, ok := s.unowned[key]; ok {
		gap = now.Sub(since)
		s.longest = max(s.longest, gap)
		delete(s.unowned, key)
	}
	if !had {
		return
	}
	s.moves[key]++
	s.total++
	if !s.quiet {
		fmt.Printf("%23s shard %-3s %-28s fence %-6d → %-28s fence %-6d (unowned %.1fs)\n", "", key, was.pod, was.fence, g.pod, g.fence, gap.Seconds())
	}
}

// owners are the shards each pod owns now, from the Leases.
func (s *shardDemo) owners() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for key, g := range s.last {
		if _, lost := s.unowned[key]; !lost {
			out[g.pod] = append(out[g.pod], key)
		}
	}
	return out
}

// settled waits until every shard is owned by one of the pods, n pods own
// shards, none of them are being deleted, and nothing moved for a second.
func (s *shardDemo) settled(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	quietSince, total := time.Now(), -1
	for time.Now().Before(deadline) {
		s.mu.Lock()
		if s.total != total {
			quietSince, total = time.Now(), s.total
		}
		s.mu.Unlock()
		owners := s.owners()
		count := 0
		for _, keys := range owners {
			count += len(keys)
		}
		set := &fencingv1alpha1.FencedShardSet{}
		err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: shardSet}, set)
		if err == nil && count == shardCount && len(owners) == n && set.Status.Owned == shardCount && time.Since(quietSince) > 2*time.Second {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the %d shards were not owned by %d pods within %s: %v", shardCount, n, timeout, s.owners())
}

func (s *shardDemo) showOwners() {
	owners := s.owners()
	for _, pod := range slices.Sorted(maps.Keys(owners)) {
		keys := owners[pod]
		slices.SortFunc(keys, func(a, b string) int { return atoi(a) - atoi(b) })
		fmt.Printf("%23s %-28s %2d shards: %s\n", "", pod, len(keys), strings.Join(keys, " "))
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

func (s *shardDemo) firstGrants() error {
	t0 := time.Now()
	if err := s.settled(3, 3*time.Minute); err != nil {
		return err
	}
	s.say("All %d shards owned, %.1fs after the Deployment was created:", shardCount, time.Since(t0).Seconds())
	s.showOwners()
	s.mu.Lock()
	s.quiet, s.moves, s.total, s.longest = false, map[string]int{}, 0, 0
	s.mu.Unlock()
	return nil
}

// aShardOf returns a shard the pod owns, and its fence.
func (s *shardDemo) aShardOf(pod string) (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(s.last)) {
		if g := s.last[key]; g.pod == pod {
			if _, lost := s.unowned[key]; !lost {
				return key, g.fence
			}
		}
	}
	return "", 0
}

func (s *shardDemo) firstWrites() error {
	s.step("Each pod writes an object of one of its shards, with that shard's fence")
	pods, err := s.shardPods()
	if err != nil {
		return err
	}
	for i := range pods {
		key, fence := s.aShardOf(pods[i].Name)
		if err := s.write(&pods[i], key, fence, true); err != nil {
			return err
		}
	}
	s.step("In each pod, fence shards runs one worker per shard, from the file the kubelet projects")
	explain("The kubelet updates /etc/fencedlease/shards from the pod's annotation at its next sync of the pod (up to a minute).")
	for i := range pods {
		key, fence := s.aShardOf(pods[i].Name)
		if err := s.workerSays(&pods[i], fmt.Sprintf("shard %s: working with fence %d", key, fence), 3*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// shardPods are the Deployment's pods that are not being deleted.
func (s *shardDemo) shardPods() ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := s.c.List(s.ctx, list, client.InNamespace(s.ns), client.MatchingLabels{"app": shardApp}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// write writes ConfigMap shard-<key> as the pod, with its bound token,
// labelled with the shard, carrying fence; want says whether the API
// server should accept it.
func (s *shardDemo) write(pod *corev1.Pod, key string, fence int64, want bool) error {
	pc, err := testenv.PodClient(s.ctx, s.cl.RestConfig, pod)
	if err != nil {
		return err
	}
	name := "shard-" + key
	cm := &corev1.ConfigMap{}
	err = pc.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name,
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: shardSet, fencingv1alpha1.LabelShard: key}}}
	case err != nil:
		return fmt.Errorf("read ConfigMap %s as pod %s: %w", name, pod.Name, err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[fencingv1alpha1.AnnotationFence] = record.FormatFence(fence)
	cm.Data = map[string]string{"written-by": pod.Name, "at": time.Now().Format(time.RFC3339Nano)}
	if cm.ResourceVersion == "" {
		err = pc.Create(s.ctx, cm)
	} else {
		err = pc.Update(s.ctx, cm)
	}
	switch {
	case want && err != nil:
		return fmt.Errorf("the owner %s's write of shard %s with fence %d was rejected: %w", pod.Name, key, fence, err)
	case want:
		s.accepted++
		s.say("ACCEPTED: %s wrote ConfigMap %s (shard %s) with fence %d.", pod.Name, name, key, fence)
	case err == nil:
		return fmt.Errorf("the write of %s to shard %s with fence %d was accepted", pod.Name, key, fence)
	case !apierrors.IsForbidden(err):
		return fmt.Errorf("the write of %s failed, but not by the API server's decision: %w", pod.Name, err)
	default:
		s.rejected++
		s.say("REJECTED by the API server: %v", err)
	}
	return nil
}

func (s *shardDemo) deletePod() error {
	pods, err := s.shardPods()
	if err != nil {
		return err
	}
	victim := pods[0]
	s.step(fmt.Sprintf("Pod %s is deleted: its shards move, each with a higher fence", victim.Name))
	explain("Its grants are revoked at once; under Safe each shard waits out its lease (%ds) before its next grant.", shardLease)
	explain("The Deployment's new pod is the youngest with room: it takes them, and the other pods' shards stay put.")
	t0 := time.Now()
	if err := s.c.Delete(s.ctx, &victim); err != nil {
		return err
	}
	if err := s.settled(3, 2*time.Minute); err != nil {
		return err
	}
	s.say("All %d shards owned again %.1fs after the deletion:", shardCount, time.Since(t0).Seconds())
	s.showOwners()
	return nil
}

func (s *shardDemo) pauseNode() error {
	pods, err := s.shardPods()
	if err != nil {
		return err
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	var paused corev1.Pod
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		if len(byNode[node]) == 1 {
			paused = byNode[node][0]
		}
	}
	if paused.Name == "" {
		paused = pods[0]
	}
	node := paused.Spec.NodeName
	key, fence := s.aShardOf(paused.Name)
	s.step(fmt.Sprintf("Node %s is paused (its kubelet stopped): pod %s stalls past its shards' lease", node, paused.Name))
	explain("The node is marked lost %s after its last heartbeat; its pods' shards are revoked, and granted", s.cl.NodeMonitorGracePeriod)
	explain("to the other pods once their lease (%ds) has run out. The paused pod still holds shard %s's fence %d.", shardLease, key, fence)
	t0 := time.Now()
	if err := s.cl.StopKubelet(node); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s.mu.Lock()
		g := s.last[key]
		s.mu.Unlock()
		if g.fence > fence {
			s.say("Shard %s moved to %s with fence %d, %.1fs after the kubelet stopped.", key, g.pod, g.fence, time.Since(t0).Seconds())
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shard %s did not move from the paused pod %s in 2 minutes", key, paused.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.step(fmt.Sprintf("The paused pod %s wakes and writes shard %s with the fence it had", paused.Name, key))
	if err := s.write(&paused, key, fence, false); err != nil {
		return err
	}
	s.mu.Lock()
	g := s.last[key]
	s.mu.Unlock()
	for _, p := range pods {
		if p.Name == g.pod {
			if err := s.write(&p, key, g.fence, true); err != nil {
				return err
			}
		}
	}
	s.step(fmt.Sprintf("The kubelet of %s resumes: the pod takes its share again", node))
	if err := s.cl.ContinueKubelet(node); err != nil {
		return err
	}
	if _, err := s.waitNode(node, true, 2*time.Minute); err != nil {
		return err
	}
	if err := s.workerSays(&paused, fmt.Sprintf("shard %s: fence %d lost, stopped", key, fence), 3*time.Minute); err != nil {
		return err
	}
	explain("Its kubelet rewrote its shards file: fence shards stopped the worker of each shard it had lost.")
	if err := s.settled(3, 2*time.Minute); err != nil {
		return err
	}
	s.showOwners()
	return nil
}

func (s *shardDemo) rollingUpdate() error {
	s.step("A rolling update of the 3 pods (surge 1): each shard should move once, to a pod of the new revision")
	s.mu.Lock()
	s.moves, s.total, s.longest = map[string]int{}, 0, 0
	s.mu.Unlock()
	dep := &appsv1.Deployment{}
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: shardApp}, dep); err != nil {
		return err
	}
	base := dep.DeepCopy()
	dep.Spec.Template.Annotations["demo/version"] = "2"
	if err := s.c.Patch(s.ctx, dep, client.MergeFrom(base)); err != nil {
		return err
	}
	t0 := time.Now()
	deadline := t0.Add(5 * time.Minute)
	for {
		done, err := s.rolledOut(dep)
		if err != nil {
			return err
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the rolling update did not finish in 5 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := s.settled(3, 2*time.Minute); err != nil {
		return err
	}
	s.mu.Lock()
	most := 0
	for _, n := range s.moves {
		most = max(most, n)
	}
	s.say("Rolled out in %.1fs: %d moves of %d shards, at most %d per shard; the longest a shard was unowned: %.1fs.",
		time.Since(t0).Seconds(), s.total, len(s.moves), most, s.longest.Seconds())
	s.mu.Unlock()
	s.showOwners()
	return nil
}

func (s *shardDemo) summary() {
	s.step("Summary")
	s.say("Writes accepted: %d (each by the shard's owner, with its current fence); rejected: %d (the paused pod's).", s.accepted, s.rejected)
	if v := s.checker.Violations(); len(v) > 0 {
		s.say("VIOLATIONS: %v", v)
		return
	}
	s.say("History checked (every publication of the pods, in the API server's order): no shard was ever published to two pods at once,")
	s.say("no shard's fence ever went down.")
}
