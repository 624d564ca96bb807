package fencedlease

import (
	"context"
	"errors"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// DefaultPendingGrace is how long a grant written but not committed is left to
// its writer before it is superseded.
const DefaultPendingGrace = 2 * time.Second

// Reconciler reconciles FencedLeases against their Leases and pods.
type Reconciler struct {
	client.Client
	// APIReader reads from the API server, bypassing the cache, where a stale
	// read could publish a token that is no longer current.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock is the monotonic clock that judges renewals and expiry.
	Clock clock.PassiveClock
	// PendingGrace: see DefaultPendingGrace.
	PendingGrace time.Duration
	// Protection, if set, reports a FencedLease whose namespace the fencing
	// webhook does not cover as Degraded (ProtectionUnavailable).
	Protection ProtectionChecker

	observations *observations
}

// scope is what one reconcile knows and decides about one FencedLease.
type scope struct {
	key types.NamespacedName
	fl  *fencingv1alpha1.FencedLease
	// recorded is the status as read: a grant is published only once the
	// status records its fence.
	recorded fencingv1alpha1.FencedLeaseStatus
	lease    *coordinationv1.Lease
	pods     *pods
	plan     holder.Plan
	// degraded is why the operator cannot do what the spec asks, if it cannot.
	degraded *condition
	// inputErr is set when the inputs could not be read.
	inputErr error
	// stale is set when a write found the Lease changed: what was read is
	// out of date, so nothing more is done until the next reconcile.
	stale bool
}

type condition struct{ reason, message string }

// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases/finalizers,verbs=update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=get;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile grants, renews, revokes and publishes the lease of one FencedLease.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := r.Get(ctx, req.NamespacedName, fl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fl.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, fl)
	}
	if !controllerutil.ContainsFinalizer(fl, fencingv1alpha1.Finalizer) {
		base := fl.DeepCopy()
		controllerutil.AddFinalizer(fl, fencingv1alpha1.Finalizer)
		return ctrl.Result{}, r.Patch(ctx, fl, client.MergeFrom(base))
	}

	s := &scope{key: req.NamespacedName, fl: fl, recorded: *fl.Status.DeepCopy()}
	base := fl.DeepCopy()
	defer func() {
		if err := r.patchStatus(ctx, base, s, retErr == nil); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	for _, step := range []func(context.Context, *scope) (ctrl.Result, error){
		r.reconcileInputs,
		r.reconcileGrant,
		r.reconcilePods,
	} {
		res, err := step(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		result = soonest(result, res)
		if s.stale || (s.degraded != nil && s.lease == nil) {
			break
		}
	}
	return result, nil
}

// reconcileInputs reads the Lease (creating it if missing) and the pods.
func (r *Reconciler) reconcileInputs(ctx context.Context, s *scope) (ctrl.Result, error) {
	l, err := r.getOrCreateLease(ctx, s.fl)
	var notOwned errLeaseNotOwned
	if errors.As(err, &notOwned) {
		s.degraded = &condition{reason: fencingv1alpha1.ReasonLeaseConflict, message: err.Error()}
		return ctrl.Result{}, nil
	}
	if err != nil {
		s.inputErr = err
		return ctrl.Result{}, err
	}
	p, err := r.gatherPods(ctx, s.fl)
	var invalid invalidSelectorError
	if errors.As(err, &invalid) {
		// Bad input changes nothing: no write to the Lease or the pods.
		s.degraded = &condition{reason: fencingv1alpha1.ReasonInvalidSelector, message: err.Error()}
		return ctrl.Result{}, nil
	}
	if err != nil {
		s.inputErr = err
		return ctrl.Result{}, err
	}
	s.lease, s.pods = l, p
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller: it watches FencedLeases, the
// Leases they own, and pods (mapped to the FencedLeases that select them or
// whose annotations they carry).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.PendingGrace <= 0 {
		r.PendingGrace = DefaultPendingGrace
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.observations = newObservations(r.Clock)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&fencingv1alpha1.FencedLease{}).
		Owns(&coordinationv1.Lease{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.fencedLeasesForPod), builder.WithPredicates()).
		Named("fencedlease")
	if r.Protection != nil {
		for _, src := range r.Protection.Sources(mgr.GetClient()) {
			b = b.WatchesRawSource(src)
		}
	}
	return b.Complete(r)
}

// soonest combines two results, keeping the earliest requeue.
func soonest(a, b ctrl.Result) ctrl.Result {
	switch {
	case a.RequeueAfter == 0:
		return b
	case b.RequeueAfter == 0 || a.RequeueAfter < b.RequeueAfter:
		return a
	default:
		return b
	}
}
