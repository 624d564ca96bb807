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
// and of nodes only what says whether they are lost is kept.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:           {},
			&coordinationv1.Lease{}: {},
			&corev1.Node{}:          {Transform: slimNode},
		},
	}
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

// Options are the knobs of the operator's parts.
type Options struct {
	// Clock judges renewals and expiry; the real monotonic clock by default.
	Clock clock.PassiveClock
	// PendingGrace: see fencedlease.DefaultPendingGrace.
	PendingGrace time.Duration
	// Workers is how many FencedLeases are reconciled at once; see
	// fencedlease.DefaultWorkers.
	Workers int
	// WrapClient, if set, wraps the client of the controller (tests use it to
	// inject faults such as a lost response).
	WrapClient func(client.Client) client.Client
	// Protection, if set, reports FencedLeases in namespaces that the fencing
	// webhook does not cover (see Protection in webhooks.go).
	Protection fencedlease.ProtectionChecker
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
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up FencedLease controller: %w", err)
	}
	return nil
}
