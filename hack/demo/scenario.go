package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const (
	app       = "exporter"
	stateName = "export-state"
	// leaseSeconds is short so that the demo does not wait long where
	// takeover Safe waits for the old grant to expire.
	leaseSeconds = 6
	grace        = 30
	demoLabel    = "fencedlease.io/demo"
)

func (d *demo) scenario() error {
	if err := d.workload(); err != nil {
		return err
	}
	holder, fence, err := d.firstHolder()
	if err != nil {
		return err
	}
	if err := d.firstWrites(holder, fence); err != nil {
		return err
	}
	holder, fence, err = d.deleteHolder(holder, fence)
	if err != nil {
		return err
	}
	holder, fence, err = d.failNode(holder, fence)
	if err != nil {
		return err
	}
	return d.rollingUpdate(holder, fence)
}

// workload creates a fresh namespace with the FencedLease and the
// Deployment; namespaces of earlier runs are deleted (in the background).
func (d *demo) workload() error {
	d.step("A singleton workload: a FencedLease and a 3-replica Deployment")
	old := &corev1.NamespaceList{}
	if err := d.c.List(d.ctx, old, client.MatchingLabels{demoLabel: "true"}); err != nil {
		return err
	}
	for i := range old.Items {
		if old.Items[i].DeletionTimestamp == nil {
			_ = d.c.Delete(d.ctx, &old.Items[i])
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "demo-", Labels: map[string]string{demoLabel: "true"}}}
	if err := d.c.Create(d.ctx, ns); err != nil {
		return fmt.Errorf("create the demo namespace: %w", err)
	}
	d.ns = ns.Name
	d.say("Namespace %s (the namespaces of earlier runs are being deleted).", d.ns)
	// RBAC lets the workload write ConfigMaps: only fencing stands in the way.
	if err := d.c.Create(d.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}},
	}); err != nil {
		return err
	}
	if err := d.c.Create(d.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: d.ns, Name: "default"}},
	}); err != nil {
		return err
	}
	fl := testenv.FencedLease(d.ns, app, map[string]string{"app": app}, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = leaseSeconds
		fl.Spec.Takeover = fencingv1alpha1.TakeoverSafe
		fl.Spec.ReadinessGate = true
	})
	if err := d.c.Create(d.ctx, fl); err != nil {
		return fmt.Errorf("create FencedLease %s/%s: %w", d.ns, app, err)
	}
	d.say("FencedLease %s: candidates are the pods labelled app=%s; lease %ds, takeover Safe, readiness gate on.", app, app, leaseSeconds)
	explain("Safe: a new holder is granted only once the old grant has expired. The readiness gate makes only the holder Ready.")

	checker, err := testenv.WatchHolders(d.ctx, d.cl.RestConfig, d.ns)
	if err != nil {
		return err
	}
	d.checker = checker
	if err := d.c.Create(d.ctx, deployment(d.ns, "1")); err != nil {
		return fmt.Errorf("create Deployment %s/%s: %w", d.ns, app, err)
	}
	d.say("Deployment %s: 3 replicas, pods labelled fencedlease.io/inject=true (the operator's pod webhook adds the token files).", app)
	explain("The protected ConfigMap %s carries the label fencedlease.io/protected-by=%s: only the holder may write it,", stateName, app)
	explain("and only with its current fence in the annotation fencedlease.io/fence.")
	return nil
}

// workScript is the workload's container: fence run starts the work only
// on the holder, with the fence read from the token files, and stops it
// (SIGTERM) when the pod stops holding or is deleted.
const workScript = `exec /fence run --grace-period 15s -- /bin/sh -c '` +
	`echo "work started with fence $FENCE_TOKEN, read from /etc/fencedlease/fence"; ` +
	`trap "echo \"SIGTERM: flushing for 10s\"; sleep 10; echo \"work stopped\"; exit 0" TERM; while :; do sleep 0.2; done'`

func deployment(ns, version string) *appsv1.Deployment {
	labels := map[string]string{"app": app, fencingv1alpha1.LabelInject: "true"}
	spec := corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](grace),
		Containers: []corev1.Container{{Name: app, Image: "fencedlease.local/workload:dev", ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", workScript}}},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		}},
	}
	// On the real nodes, in the pod network: not host-network.
	cluster.OnRealNode(&spec)
	spec.HostNetwork = false
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			// With the readiness gate only the holder is Ready: a rollout
			// that waited for new pods to become available would stall
			// (docs/workloads.md).
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromString("100%"))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"demo/version": version}},
				Spec:       spec,
			},
		},
	}
}

func (d *demo) firstHolder() (*corev1.Pod, int64, error) {
	t0 := time.Now()
	holder, fence, err := d.waitHolder(nil, 2*time.Minute)
	if err != nil {
		return nil, 0, err
	}
	d.step(fmt.Sprintf("%s holds the lease with fence %d (%.1fs after the Deployment was created)", holder.Name, fence, time.Since(t0).Seconds()))
	d.showPods()
	explain("The fence is the resourceVersion of the Lease write that granted it: the next grant's is higher.")
	var volumes []string
	for _, v := range holder.Spec.Volumes {
		if v.DownwardAPI != nil {
			volumes = append(volumes, v.Name)
		}
	}
	var gates []string
	for _, g := range holder.Spec.ReadinessGates {
		gates = append(gates, string(g.ConditionType))
	}
	d.say("The pod webhook injected into the ReplicaSet's pods: volume %v at /etc/fencedlease, readiness gate %v.", volumes, gates)
	explain("The kubelet projects the pod's annotations into /etc/fencedlease/fence and /etc/fencedlease/role;")
	explain("the container runs fence run, which starts the work on the holder alone, with the fence it reads there:")
	if err := d.processSays(holder, fmt.Sprintf("work started with fence %d", fence), time.Minute); err != nil {
		return nil, 0, err
	}
	d.handoffs = append(d.handoffs, handoff{cause: "first grant", from: "-", to: holder.Name, fence: fence, took: time.Since(t0)})
	return holder, fence, nil
}

func (d *demo) firstWrites(holder *corev1.Pod, fence int64) error {
	d.step("The holder writes the protected ConfigMap")
	if err := d.expectAccepted(holder, fence); err != nil {
		return err
	}
	standby, err := d.aStandby(holder)
	if err != nil {
		return err
	}
	d.say("A standby, %s, copies the holder's fence %d and writes as itself:", standby.Name, fence)
	return d.expectRejected(standby, fence)
}

func (d *demo) deleteHolder(holder *corev1.Pod, fence int64) (*corev1.Pod, int64, error) {
	d.step(fmt.Sprintf("The holder's pod %s is deleted (it has %ds to shut down)", holder.Name, grace))
	before, err := d.podNames()
	if err != nil {
		return nil, 0, err
	}
	// The old holder's client, its token bound to the pod: made now, while
	// the pod exists, as the pod's own token was.
	oldClient, err := testenv.PodClient(d.ctx, d.cl.RestConfig, holder)
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	if err := d.c.Delete(d.ctx, holder); err != nil {
		return nil, 0, err
	}
	explain("A pod being deleted is no longer a candidate: the operator revokes its grant at once, and with takeover Safe")
	explain("grants the next pod when the old grant has expired (at most %ds).", leaseSeconds)
	if err := d.processSays(holder, "SIGTERM: flushing", time.Minute); err != nil {
		return nil, 0, err
	}
	explain("The kubelet's SIGTERM reached the work through fence run; the work takes 10s to stop.")
	next, nextFence, err := d.waitHolder(holder, time.Minute)
	if err != nil {
		return nil, 0, err
	}
	took := time.Since(t0)
	d.say("%s took over with fence %d > %d, %.1fs after the deletion.", next.Name, nextFence, fence, took.Seconds())
	if err := d.processSays(next, fmt.Sprintf("work started with fence %d", nextFence), time.Minute); err != nil {
		return nil, 0, err
	}
	d.handoffs = append(d.handoffs, handoff{cause: "holder pod deleted", from: holder.Name, to: next.Name, fence: nextFence, took: took})
	if err := d.waitPods(3, before); err != nil {
		return nil, 0, err
	}
	d.showPods()

	d.step(fmt.Sprintf("The old holder %s, still shutting down, writes with its old fence %d", holder.Name, fence))
	explain("It authenticates as itself (its own pod-bound token, still valid while the pod exists).")
	if err := d.expectRejectedWith(oldClient, holder, fence); err != nil {
		return nil, 0, err
	}
	return next, nextFence, d.expectAccepted(next, nextFence)
}

func (d *demo) failNode(holder *corev1.Pod, fence int64) (*corev1.Pod, int64, error) {
	node := holder.Spec.NodeName
	d.step(fmt.Sprintf("The holder's node %s fails: its kubelet stops", node))
	explain("The kubelet is stopped (SIGSTOP): no heartbeat, no status, no update of the pods' files, as when a node hangs.")
	explain("Its containers run on. The node lifecycle controller marks the node lost %s after the last heartbeat;", d.cl.NodeMonitorGracePeriod)
	explain("the operator then counts the holder as gone.")
	t0 := time.Now()
	if err := d.cl.StopKubelet(node); err != nil {
		return nil, 0, err
	}
	lostAt, err := d.waitNode(node, false, 2*time.Minute)
	if err != nil {
		return nil, 0, err
	}
	d.say("Node %s is marked lost (Ready Unknown), %.1fs after its kubelet stopped.", node, lostAt.Sub(t0).Seconds())
	next, nextFence, err := d.waitHolder(holder, 2*time.Minute)
	if err != nil {
		return nil, 0, err
	}
	took := time.Since(t0)
	d.say("%s on %s took over with fence %d > %d: %.1fs after the kubelet stopped, %.1fs after the node was marked lost.",
		next.Name, next.Spec.NodeName, nextFence, fence, took.Seconds(), time.Since(lostAt).Seconds())
	d.handoffs = append(d.handoffs, handoff{cause: "holder's node lost", from: holder.Name, to: next.Name, fence: nextFence, took: took})
	if err := d.processSays(next, fmt.Sprintf("work started with fence %d", nextFence), time.Minute); err != nil {
		return nil, 0, err
	}
	d.showPods()
	log, _ := d.processLog(holder)
	d.step(fmt.Sprintf("The old holder %s still works: its files say fence %d, and no kubelet updates them", holder.Name, fence))
	if last := lastLine(log); last != "" {
		d.say("Its process's last words: %q", last)
	}
	explain("It is cut off from its node, not from the API server, and writes with the fence it has:")
	if err := d.expectRejected(holder, fence); err != nil {
		return nil, 0, err
	}
	if err := d.expectAccepted(next, nextFence); err != nil {
		return nil, 0, err
	}
	d.step(fmt.Sprintf("The kubelet of %s resumes", node))
	if err := d.cl.ContinueKubelet(node); err != nil {
		return nil, 0, err
	}
	if err := d.processSays(holder, "work stopped", 2*time.Minute); err != nil {
		return nil, 0, err
	}
	explain("The kubelet rewrote the old holder's files (role standby): fence run stopped its work.")
	if _, err := d.waitNode(node, true, 2*time.Minute); err != nil {
		return nil, 0, err
	}
	d.say("Node %s is Ready again.", node)
	return next, nextFence, nil
}

func (d *demo) rollingUpdate(holder *corev1.Pod, fence int64) error {
	d.step("A rolling update: the pod template changes (annotation demo/version=2)")
	dep := &appsv1.Deployment{}
	if err := d.c.Get(d.ctx, client.ObjectKey{Namespace: d.ns, Name: app}, dep); err != nil {
		return err
	}
	dep.Spec.Template = deployment(d.ns, "2").Spec.Template
	t0 := time.Now()
	if err := d.c.Update(d.ctx, dep); err != nil {
		return err
	}
	explain("The Deployment replaces every pod; each time the holder's pod goes, the longest-ready candidate is granted.")
	deadline := time.Now().Add(2 * time.Minute)
	cur, curFence := holder, fence
	for {
		p, f, ok, err := cluster.Holder(d.ctx, d.c, d.ns, app)
		if err != nil {
			return err
		}
		if ok && f != curFence {
			if f < curFence {
				return fmt.Errorf("fence went back from %d to %d", curFence, f)
			}
			took := time.Since(t0)
			d.say("%s took over from %s with fence %d > %d (%.1fs into the update).", p.Name, cur.Name, f, curFence, took.Seconds())
			d.handoffs = append(d.handoffs, handoff{cause: "rolling update", from: cur.Name, to: p.Name, fence: f, took: took})
			cur, curFence = p, f
		}
		done, err := d.rolledOut(dep)
		if err != nil {
			return err
		}
		if ok && done && p.Annotations["demo/version"] == "2" && p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != holder.Labels[appsv1.DefaultDeploymentUniqueLabelKey] {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the rolling update did not finish, with a new pod holding, in 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.say("Rolled out in %.1fs; the holder is %s (new template) with fence %d.", time.Since(t0).Seconds(), cur.Name, curFence)
	d.showPods()
	if err := d.expectAccepted(cur, curFence); err != nil {
		return err
	}
	d.violations = d.checker.Violations()
	d.publishedFences = d.checker.Published()
	if len(d.violations) > 0 {
		return fmt.Errorf("the watch saw an invariant broken: %v", d.violations)
	}
	return nil
}

func (d *demo) rolledOut(dep *appsv1.Deployment) (bool, error) {
	cur := &appsv1.Deployment{}
	if err := d.c.Get(d.ctx, client.ObjectKeyFromObject(dep), cur); err != nil {
		return false, err
	}
	return cur.Status.ObservedGeneration >= dep.Generation && cur.Status.UpdatedReplicas == 3 && cur.Status.Replicas == 3, nil
}

// waitHolder waits for a published holder other than not.
func (d *demo) waitHolder(not *corev1.Pod, timeout time.Duration) (*corev1.Pod, int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, f, ok, err := cluster.Holder(d.ctx, d.c, d.ns, app)
		if err != nil {
			return nil, 0, err
		}
		if ok && (not == nil || p.UID != not.UID) {
			return p, f, nil
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("no new holder of FencedLease %s/%s after %s", d.ns, app, timeout)
		}
		select {
		case <-d.ctx.Done():
			return nil, 0, d.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitNode waits until node's Ready condition is ready, and returns when
// it saw it so.
func (d *demo) waitNode(node string, ready bool, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		n := &corev1.Node{}
		if err := d.c.Get(d.ctx, client.ObjectKey{Name: node}, n); err != nil {
			return time.Time{}, err
		}
		if cluster.NodeReady(n) == ready {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("node %s: Ready is still %t after %s", node, !ready, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPods waits until the ReplicaSet has replaced the deleted pod: n pods
// not being deleted, one of them new.
func (d *demo) waitPods(n int, before []string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		pods, err := d.pods()
		if err != nil {
			return err
		}
		var live, fresh []string
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				live = append(live, p.Name)
				if !slices.Contains(before, p.Name) {
					fresh = append(fresh, p.Name)
				}
			}
		}
		if len(live) >= n && len(fresh) > 0 {
			d.say("The ReplicaSet replaced the deleted pod: %s is a new standby.", strings.Join(fresh, ", "))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ReplicaSet did not replace the deleted pod in a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *demo) pods() ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := d.c.List(d.ctx, list, client.InNamespace(d.ns), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

func (d *demo) podNames() ([]string, error) {
	pods, err := d.pods()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out, nil
}

func (d *demo) aStandby(holder *corev1.Pod) (*corev1.Pod, error) {
	pods, err := d.pods()
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].UID != holder.UID && pods[i].DeletionTimestamp == nil {
			return &pods[i], nil
		}
	}
	return nil, errors.New("no standby pod")
}

func (d *demo) showPods() {
	pods, err := d.pods()
	if err != nil {
		d.say("list pods: %v", err)
		return
	}
	fmt.Printf("%23s %-27s %-12s %-8s %-6s %-6s %s\n", "", "POD", "NODE", "ROLE", "FENCE", "READY", "")
	for _, p := range pods {
		role := p.Annotations[fencingv1alpha1.AnnotationRole]
		if role == "" {
			role = "-"
		}
		f := p.Annotations[fencingv1alpha1.AnnotationFence]
		if f == "" {
			f = "-"
		}
		ready := "false"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = "true"
			}
		}
		note := ""
		if p.DeletionTimestamp != nil {
			note = "(terminating)"
		}
		n := &corev1.Node{}
		if err := d.c.Get(d.ctx, client.ObjectKey{Name: p.Spec.NodeName}, n); err == nil && !cluster.NodeReady(n) {
			note += "(node lost)"
		}
		fmt.Printf("%23s %-27s %-12s %-8s %-6s %-6s %s\n", "", p.Name, p.Spec.NodeName, role, f, ready, note)
	}
}

func (d *demo) expectAccepted(pod *corev1.Pod, fence int64) error {
	err := cluster.WriteAs(d.ctx, d.cl.RestConfig, pod, stateName, app, fence, map[string]string{"written-by": pod.Name, "at": time.Now().Format(time.RFC3339Nano)})
	if err != nil {
		return fmt.Errorf("the holder %s's write with fence %d was rejected: %w", pod.Name, fence, err)
	}
	d.accepted++
	d.say("ACCEPTED: %s wrote ConfigMap %s with fence %d.", pod.Name, stateName, fence)
	return nil
}

func (d *demo) expectRejected(pod *corev1.Pod, fence int64) error {
	pc, err := testenv.PodClient(d.ctx, d.cl.RestConfig, pod)
	if err != nil {
		return err
	}
	return d.expectRejectedWith(pc, pod, fence)
}

// expectRejectedWith is expectRejected with a client of the pod's.
func (d *demo) expectRejectedWith(pc client.Client, pod *corev1.Pod, fence int64) error {
	err := cluster.WriteWith(d.ctx, pc, pod, stateName, app, fence, map[string]string{"written-by": pod.Name})
	if err == nil {
		return fmt.Errorf("the write of %s with fence %d was accepted", pod.Name, fence)
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		return fmt.Errorf("the write of %s failed, but not by the API server's decision: %w", pod.Name, err)
	}
	d.rejected++
	d.say("REJECTED by the API server: %v", err)
	return nil
}
