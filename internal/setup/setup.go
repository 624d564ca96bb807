package setup

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/controllers/fencedshardset"
)

// Name is the operator's name: its event source, field manager and leader
// election prefix.
const Name = "fencedlease"

// Scheme returns the scheme of every type the operator reads or writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(s))
	must(fencingv1alpha1.AddToScheme(s))
	return s
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// CacheOptions keeps the informer caches small: managed fields are dropped,
// of pods only what the operator reads is kept (slimPod), and of nodes only
// what says whether they are lost.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:           {Transform: slimPod},
			&coordinationv1.Lease{}: {},
			&corev1.Node{}:          {Transform: slimNode},
		},
	}
}

// WholePods returns the options with pods cached whole (managed fields
// still dropped): what the cache held before slimPod, for comparison.
func WholePods(o cache.Options) cache.Options {
	by := make(map[client.Object]cache.ByObject, len(o.ByObject))
	for obj, b := range o.ByObject {
		if _, ok := obj.(*corev1.Pod); ok {
			b.Transform = nil
		}
		by[obj] = b
	}
	o.ByObject = by
	return o
}

// slimNode keeps of a node its metadata (without managed fields), its taints
// and its conditions: the images, addresses and volumes of a node are most
// of its size, and the operator needs none of them.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions}
	n.Spec = corev1.NodeSpec{Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable}
	return n, nil
}

// lastApplied is the annotation kubectl apply leaves: a copy of the whole
// object, never read by the operator.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// slimPod keeps of a pod what the operator reads from its cache: the
// metadata (labels and annotations included: the controller publishes
// holders there and selects by labels), the node, the readiness gates, the
// phase, the conditions and, of a pod in phase Succeeded or Failed, the
// containers' names and states (holder.Terminated counts and reads them;
// of a pod in any other phase it reads nothing more than the phase). The
// controller writes pods only with patches, so what is dropped here is
// never written back. A new read of another pod field from the cache must
// be kept here too (TestSlimPodKeepsWhatIsRead).
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	delete(p.Annotations, lastApplied)
	spec, status := corev1.PodSpec{NodeName: p.Spec.NodeName, ReadinessGates: p.Spec.ReadinessGates},
		corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		// Only a finished pod's containers are read (holder.Terminated):
		// a running one's would be a kilobyte of empty structs per pod.
		spec.InitContainers, spec.Containers = names(p.Spec.InitContainers), names(p.Spec.Containers)
		status.InitContainerStatuses, status.ContainerStatuses = states(p.Status.InitContainerStatuses), states(p.Status.ContainerStatuses)
	}
	p.Spec, p.Status = spec, status
	return p, nil
}

func names(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name}
	}
	return out
}

func states(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if ss == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, s := range ss {
		out[i] = corev1.ContainerStatus{Name: s.Name, Ready: s.Ready, State: s.State}
	}
	return out
}

// Options are the knobs of the operator's parts.
type Options struct {
	// Clock judges renewals and expiry; the real monotonic clock by default.
	Clock clock.PassiveClock
	// PendingGrace: see fencedlease.DefaultPendingGrace.
	PendingGrace time.Duration
	// Workers is how many FencedLeases are reconciled at once; see
	// fencedlease.DefaultWorkers.
	Workers int
	// StatusRenewalInterval: see fencedlease.Reconciler.
	StatusRenewalInterval time.Duration
	// WrapClient, if set, wraps the client of the controller (tests use it to
	// inject faults such as a lost response).
	WrapClient func(client.Client) client.Client
	// Protection, if set, reports FencedLeases in namespaces that the fencing
	// webhook does not cover (see Protection in webhooks.go).
	Protection fencedlease.ProtectionChecker
	// Heartbeat, if set, vouches for the grants of renewal Operator (see
	// fencedlease.Heartbeat); without it each grant is renewed on its own
	// Lease.
	Heartbeat *fencedlease.Heartbeat
}

// Add registers the controller with the manager.
func Add(mgr ctrl.Manager, opts Options) error {
	c := mgr.GetClient()
	if opts.WrapClient != nil {
		c = opts.WrapClient(c)
	}
	r := &fencedlease.Reconciler{
		Client:       c,
		APIReader:    mgr.GetAPIReader(),
		Recorder:     mgr.GetEventRecorder(Name),
		Clock:        opts.Clock,
		PendingGrace: opts.PendingGrace,
		Workers:      opts.Workers,
		Protection:   opts.Protection,
		Heartbeat:    opts.Heartbeat,

		StatusRenewalInterval: opts.StatusRenewalInterval,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up FencedLease controller: %w", err)
	}
	shards := &fencedshardset.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(fencedshardset.Name), Clock: opts.Clock}
	if err := shards.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up FencedShardSet controller: %w", err)
	}
	return nil
}
