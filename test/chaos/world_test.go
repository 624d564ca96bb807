//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// world is the cluster the run plays in: one namespace, its FencedLeases,
// their candidate pods (each with its holder process), its FencedShardSets,
// their candidate pods (each with its shard process), and the nodes.
type world struct {
	cfg   runConfig
	ctx   context.Context
	env   *testenv.Env
	cp    *controlPlane
	admin client.Client
	// cleanup deletes as the garbage collector, which the admission policy
	// lets delete a FencedLease's Lease.
	cleanup client.Client
	ns      string
	rec     *Recorder

	// stop ends the holder processes between two operations (a write in
	// flight completes, so that its outcome is known).
	stop  chan struct{}
	procs sync.WaitGroup

	mu        sync.Mutex
	leases    []*lease
	shardSets []*shardSet
	lost      map[string]bool // nodes lost now
}

// lease is a FencedLease and its candidates, one per slot; a slot's pod is
// replaced (under a new name) when it is deleted.
type lease struct {
	leaseConfig
	slots []*slot
	// recreating is set while a fault deletes and creates the FencedLease.
	recreating bool
}

type slot struct {
	index int
	gen   int
	pod   *corev1.Pod
	// deleting is set while a fault deletes and replaces the pod.
	deleting bool
}

// candidateLabels select a lease's candidates.
func candidateLabels(lease string) map[string]string {
	return map[string]string{"chaos.fencedlease.io/app": lease}
}

// setup creates the namespace, the pods' right to write ConfigMaps (only the
// webhook stands in the way), the nodes, the FencedLeases and the
// FencedShardSets.
func (w *world) setup() error {
	ns, err := testenv.Namespace(w.ctx, w.admin, "chaos")
	if err != nil {
		return err
	}
	w.ns = ns
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "holder"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			// The status attack (status_test.go).
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch"}},
		},
	}
	if err := w.admin.Create(w.ctx, role); err != nil {
		return fmt.Errorf("create Role holder: %w", err)
	}
	if err := w.admin.Create(w.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "holder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "holder"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	}); err != nil {
		return fmt.Errorf("create RoleBinding holder: %w", err)
	}
	// The pods of a renewal Holder lease renew their own Lease: the workload
	// ClusterRole of config/rbac, bound in the namespace, as a workload's
	// install does (docs/install.md).
	if err := w.bindWorkloadRole(); err != nil {
		return err
	}
	for _, n := range w.cfg.Nodes {
		if err := testenv.EnsureNode(w.ctx, w.admin, n); err != nil {
			return err
		}
	}
	for _, lc := range w.cfg.Leases {
		if err := w.admin.Create(w.ctx, w.fencedLease(lc)); err != nil {
			return fmt.Errorf("create FencedLease %s: %w", lc.Name, err)
		}
		l := &lease{leaseConfig: lc}
		for i := 0; i < lc.Pods; i++ {
			l.slots = append(l.slots, &slot{index: i})
		}
		w.leases = append(w.leases, l)
	}
	return w.setupShards()
}

// fencedLease is the FencedLease of a lease's configuration.
func (w *world) fencedLease(lc leaseConfig) *fencingv1alpha1.FencedLease {
	return testenv.FencedLease(w.ns, lc.Name, candidateLabels(lc.Name), func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover, fl.Spec.LeaseDurationSeconds, fl.Spec.MaxHoldSeconds = lc.Takeover, lc.Duration, lc.MaxHold
		if lc.Renewal != "" {
			fl.Spec.Renewal = lc.Renewal
		}
	})
}

// bindWorkloadRole creates the workload ClusterRole of config/rbac (as
// fencedlease-workload, the name the install gives it) and binds it to the
// namespace's default service account.
func (w *world) bindWorkloadRole() error {
	role, err := testenv.WorkloadRole()
	if err != nil {
		return err
	}
	if err := w.admin.Create(w.ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	if err := w.admin.Create(w.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "workload"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "default"}},
	}); err != nil {
		return fmt.Errorf("create RoleBinding workload: %w", err)
	}
	return nil
}

// createObjects creates the protected objects, as a break-glass user (no one
// holds a fence yet): the webhook must be up.
func (w *world) createObjects(breakGlass client.Client) error {
	for _, l := range w.leases {
		for _, o := range l.Objects {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: o, Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: l.Name}},
				Data:       map[string]string{"value": ""},
			}
			if err := breakGlass.Create(w.ctx, cm); err != nil {
				return fmt.Errorf("create protected ConfigMap %s: %w", o, err)
			}
		}
	}
	if err := w.createShardObjects(breakGlass); err != nil {
		return err
	}
	return w.createServices(breakGlass)
}

// startPods creates every slot's first pod and its process.
func (w *world) startPods() error {
	for _, l := range w.leases {
		for _, s := range l.slots {
			if err := w.replace(l, s, w.cfg.Nodes[s.index%len(w.cfg.Nodes)]); err != nil {
				return err
			}
		}
	}
	return w.startShardPods()
}

// replace creates the slot's next pod on the node, ready since now, and
// starts its holder process.
func (w *world) replace(l *lease, s *slot, node string) error {
	w.mu.Lock()
	s.gen++
	name := fmt.Sprintf("%s-s%d-g%d", l.Name, s.index, s.gen)
	w.mu.Unlock()
	pod, err := testenv.CreatePod(w.ctx, w.admin, testenv.Pod{Namespace: w.ns, Name: name, Labels: candidateLabels(l.Name), Node: node, ServiceAccount: "default"})
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
	p := newProcess(w, l, pod, c)
	run := p.run
	if l.Renewal == fencingv1alpha1.RenewalHolder {
		// Its Session acts as the pod too, with a token of its own.
		token, err := w.podToken(pod)
		if err != nil {
			return err
		}
		run = func() { p.runSession(token) }
	}
	w.procs.Add(1)
	go func() {
		defer w.procs.Done()
		run()
	}()
	return nil
}

// pod returns a copy of the slot's current pod.
func (w *world) pod(s *slot) *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return s.pod.DeepCopy()
}

// holderSlot returns the slot whose pod the lease's status names, if any.
func (w *world) holderSlot(l *lease) *slot {
	fl := &fencingv1alpha1.FencedLease{}
	if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: l.Name}, fl); err != nil || fl.Status.Holder == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range l.slots {
		if s.pod.UID == fl.Status.Holder.PodUID {
			return s
		}
	}
	return nil
}

// liveNode picks a node that is not lost.
func (w *world) liveNode(rng *rand.Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var live []string
	for _, n := range w.cfg.Nodes {
		if !w.lost[n] {
			live = append(live, n)
		}
	}
	return live[rng.IntN(len(live))]
}

// readFinal reads every protected object once the processes have stopped.
func (w *world) readFinal() error {
	for _, l := range w.leases {
		for _, o := range l.Objects {
			call := w.rec.Now()
			cm := &corev1.ConfigMap{}
			if err := w.admin.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: o}, cm); err != nil {
				return fmt.Errorf("read ConfigMap %s: %w", o, err)
			}
			fence := record.FenceOf(cm.Annotations[fencingv1alpha1.AnnotationFence])
			w.rec.Final(Read{Object: o, Fence: fence, Value: cm.Data["value"], ResourceVersion: cm.ResourceVersion, Call: call, Return: w.rec.Now()})
		}
	}
	return w.readFinalShards()
}

// ignoreGone treats a pod that no longer exists as done with.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
