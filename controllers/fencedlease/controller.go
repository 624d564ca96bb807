package fencedlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// DefaultPendingGrace is how long a grant written but not committed is left to
// its writer before it is superseded.
const DefaultPendingGrace = 2 * time.Second

// DefaultWorkers is how many FencedLeases one operator reconciles at once.
// Reconciles spend their time waiting on the API server, so more workers than
// cores pay off; controller-runtime never runs one FencedLease twice at once.
// With 8, one operator carried about 175 Lease writes a second on 2 cores,
// short of the 200 a second that 1,000 leases of 15 s ask for; with 32 the
// same 1,000 were all held 53 s after a cold start (docs/benchmarks.md).
const DefaultWorkers = 32

// DefaultStatusRenewalInterval is how often the operator's command records,
// at most, a renewal that changes nothing else in a FencedLease's status:
// the Lease carries every renewal, the status the grant (design.md). A
// status patch costs the API server about five times a Lease update, and
// recording every renewal of 1,000 FencedLeases kept kube-apiserver busier
// than one core.
const DefaultStatusRenewalInterval = time.Minute

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
	// Workers: see DefaultWorkers.
	Workers int
	// StatusRenewalInterval is how often, at most, a renewal that changes
	// nothing else is recorded in the status (DefaultStatusRenewalInterval
	// is the command's default); 0 records every renewal. While renewals
	// are stretched, at most every pace.ReportInterval whatever it is.
	StatusRenewalInterval time.Duration
	// Protection, if set, reports a FencedLease whose namespace the fencing
	// webhook does not cover as Degraded (ProtectionUnavailable).
	Protection ProtectionChecker
	// Heartbeat, if set, vouches for the grants of renewal Operator, which
	// then cost no write of their own but one every refresh interval
	// (heartbeat.go); without it, the operator renews each grant itself.
	Heartbeat *Heartbeat
	// Concurrently, if set, runs steps of one reconcile at once and
	// returns when they all have (a simulation schedules their calls);
	// unset, each runs on a goroutine of its own.
	Concurrently func(ctx context.Context, steps ...func(context.Context))

	once sync.Once
	// mem is what this process remembers of each FencedLease.
	mem *memories
	// pace is the one place the controller meets its pace.
	pace *pacer
}

// scope is what one reconcile knows and decides about one FencedLease.
type scope struct {
	key types.NamespacedName
	fl  *fencingv1alpha1.FencedLease
	// base is the FencedLease as read, which the status patch is made from.
	base *fencingv1alpha1.FencedLease
	// mem is this process's memory of the FencedLease, loaded for this
	// reconcile (memory.go).
	mem *memory
	// recorded is the status as read: a grant is published only once the
	// status records its fence, and the status never records a Lease older
	// than the one it records.
	recorded fencingv1alpha1.FencedLeaseStatus
	lease    *coordinationv1.Lease
	pods     *pods
	plan     holder.Plan
	// degraded is why the operator cannot do what the spec asks, if it cannot.
	degraded *condition
	// inputErr is set when the inputs could not be read.
	inputErr error
	// next is what the steps found the reconcile must do next.
	next next
	// created is set when this reconcile created the Lease with its grant
	// and committed that grant, and the status as read records no grant:
	// the FencedLease's first grant, which publishFirst publishes without
	// listing the pods.
	created bool
	// outcome is what the reconcile did, for the metrics; took is how long
	// each of its steps took.
	outcome outcome
	took    [stepCount]time.Duration
}

type condition struct{ reason, message string }

// next is what the steps of a reconcile found it must do next, the most
// severe finding kept (found).
type next uint8

const (
	// goOn: what was read is current and the steps went as planned.
	goOn next = iota
	// lookAgain: a pod changed under a write of this reconcile, or a
	// publication waits for the caches: look again soon. The status is
	// still recorded.
	lookAgain
	// stale: what was read is out of date (a write found the Lease
	// changed, or the Lease as read is older than the one the status
	// records). Nothing more is done, the status is left alone, and the
	// next look, soon, starts over.
	stale
)

// found records what a step found; the most severe finding is kept.
func (s *scope) found(n next) { s.next = max(s.next, n) }

// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases/finalizers,verbs=update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile grants, renews, revokes and publishes the lease of one FencedLease.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.once.Do(r.defaults)
	fl := &fencingv1alpha1.FencedLease{}
	if err := r.Get(ctx, req.NamespacedName, fl); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.reconcileGone(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	mem := r.mem.load(req.NamespacedName)
	defer r.mem.store(mem)
	mem.refresh(fl)
	fl, err := r.fencedLeaseBehindCache(ctx, mem, fl)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !fl.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, fl, mem)
	}
	if r.waitsForCapacity(fl, r.Clock.Now()) {
		return r.waitForCapacity(ctx, fl)
	}
	if !controllerutil.ContainsFinalizer(fl, fencingv1alpha1.Finalizer) {
		if err := r.addFinalizer(ctx, fl, mem); err != nil {
			return ctrl.Result{}, err
		}
	}

	return r.reconcileFencedLease(ctx, &scope{key: req.NamespacedName, fl: fl, base: fl.DeepCopy(), recorded: *fl.Status.DeepCopy(), mem: mem})
}

// reconcileFencedLease runs the steps of a reconcile in their order: read
// the inputs; decide the plan and write the Lease; write the pods; record
// the status; publish a grant committed here, once the status records it.
// A step that fails ends the reconcile, and its status is recorded all the
// same, with nothing published. Then, whatever happened: when to come
// back, the metrics, and the pace's account of the work.
func (r *Reconciler) reconcileFencedLease(ctx context.Context, s *scope) (result ctrl.Result, retErr error) {
	started := r.Clock.Now()
	recorded := false
	defer func() {
		if !recorded {
			if err := r.timed(s, stepStatus, func() error { return r.recordAndPublish(ctx, s, false) }); err != nil {
				retErr = kerrors.NewAggregate([]error{retErr, err})
			}
		}
		result, retErr = r.finish(ctx, s, started, result, retErr)
	}()
	for _, st := range []struct {
		step step
		run  func(context.Context, *scope) (ctrl.Result, error)
	}{
		{stepInputs, r.reconcileInputs},
		{stepLease, r.reconcileGrant},
		{stepPods, r.reconcilePods},
	} {
		var res ctrl.Result
		err := r.timed(s, st.step, func() (err error) {
			res, err = st.run(ctx, s)
			return err
		})
		if err != nil {
			return ctrl.Result{}, err
		}
		result = soonest(result, res)
		if s.next == stale || s.plan.Deferred || s.lease == nil {
			break
		}
	}
	recorded = true
	return result, r.timed(s, stepStatus, func() error { return r.recordAndPublish(ctx, s, true) })
}

// timed runs one step of the reconcile and records how long it took, on
// the process's own clock (time.Since: a metric, never a decision).
func (r *Reconciler) timed(s *scope, st step, f func() error) error {
	start := time.Now()
	err := f()
	s.took[st] = time.Since(start)
	return err
}

// reconcileGone clears, for a FencedLease that is gone, what a replica that
// had not seen the deletion may have written after the finalizer cleared it.
func (r *Reconciler) reconcileGone(ctx context.Context, key types.NamespacedName) error {
	r.forget(key)
	released, err := r.releaseOrphan(ctx, key)
	if err != nil {
		return err
	}
	// The pods are listed from the API server after an orphaned Lease was
	// let go (its grant over, as in reconcileDelete); otherwise this only
	// tidies what a lagging replica wrote, and the cache will do.
	return r.clearPods(ctx, released, key.Namespace, key.Name, "")
}

// addFinalizer adds the FencedLease's finalizer. The reconcile goes on with
// the FencedLease as the patch stored it: a first grant needs no second
// look, which would wait for the cache to show the finalizer.
func (r *Reconciler) addFinalizer(ctx context.Context, fl *fencingv1alpha1.FencedLease, mem *memory) error {
	base := fl.DeepCopy()
	controllerutil.AddFinalizer(fl, fencingv1alpha1.Finalizer)
	if err := r.Patch(ctx, fl, client.MergeFrom(base)); err != nil {
		return err
	}
	mem.remember(fl)
	return nil
}

// finish ends a reconcile: when to come back, the metrics and the pace's
// account of the work.
func (r *Reconciler) finish(ctx context.Context, s *scope, started time.Time, result ctrl.Result, retErr error) (ctrl.Result, error) {
	switch {
	case retErr != nil:
		// Retried with the controller's backoff; a requeue time would be
		// ignored (and warned about).
		result.RequeueAfter = 0
		r.mem.settled(s.key)
	case s.next != goOn:
		result = soonest(result, ctrl.Result{RequeueAfter: r.mem.retryAfter(s.key)})
	default:
		r.mem.settled(s.key)
	}
	r.recordMetrics(s)
	observeSteps(s)
	r.pace.report(ctx)
	result.Priority = priorityOf(s)
	now := r.Clock.Now()
	r.pace.worked(now, now.Sub(started), keepsGrant(s))
	return result, retErr
}

// reconcileInputs reads the Lease (creating it if missing), the pods and
// their nodes.
func (r *Reconciler) reconcileInputs(ctx context.Context, s *scope) (ctrl.Result, error) {
	l, err := r.getOrCreateLease(ctx, s.fl, s.mem)
	var notOwned errLeaseNotOwned
	switch {
	case errors.As(err, &notOwned):
		s.degraded = &condition{reason: fencingv1alpha1.ReasonLeaseConflict, message: err.Error()}
		return ctrl.Result{}, nil
	case errors.Is(err, errLeaseLagging):
		s.found(stale)
		return ctrl.Result{}, nil
	case err != nil:
		s.inputErr = err
		return ctrl.Result{}, err
	}
	cached := l
	if !unsaved(l) {
		if l, err = r.leaseBehindCache(ctx, s.mem, l); err != nil {
			s.inputErr = err
			return ctrl.Result{}, err
		}
	}
	// A Lease read from the API server because the store went back is older
	// than the status, which the cache of FencedLeases still holds from the
	// lost past: that is no lag, and waiting for it would wait until that
	// cache lists again. A status patch planned on it conflicts and changes
	// nothing.
	if l == cached && s.recorded.LeaseResourceVersion != "" && l.ResourceVersion != s.recorded.LeaseResourceVersion &&
		!record.MaybeNewer(l.ResourceVersion, s.recorded.LeaseResourceVersion) {
		// The Lease cache lags behind the status: planning on it would at
		// best conflict, and recording it would move the status back.
		ctrl.LoggerFrom(ctx).V(4).Info("Lease cache lags behind the status; looking again",
			"read", l.ResourceVersion, "recorded", s.recorded.LeaseResourceVersion)
		s.found(stale)
		return ctrl.Result{}, nil
	}
	p, err := r.gatherPods(ctx, s.fl, s.mem)
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

// SetupWithManager registers the controller and its cache indexes: it
// watches FencedLeases, the Leases they own, pods (mapped to the
// FencedLeases that select or mark them) and nodes (mapped to the
// FencedLeases of their pods).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.once.Do(r.defaults)
	registerMetrics()
	if err := mgr.Add(seriesRunner{m: r.mem}); err != nil {
		return fmt.Errorf("add the series of the FencedLeases: %w", err)
	}
	for _, ix := range Indexes() {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), ix.Object, ix.Field, ix.Extract); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&fencingv1alpha1.FencedLease{}, builder.WithPredicates(fencedLeaseChanged())).
		Owns(&coordinationv1.Lease{}, builder.WithPredicates(leaseChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.fencedLeasesForPod)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.fencedLeasesForNode), builder.WithPredicates(nodeHealthChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers, RateLimiter: errorRateLimiter()}).
		Named("fencedlease")
	if r.Protection != nil {
		for _, src := range r.Protection.Sources(mgr.GetClient()) {
			b = b.WatchesRawSource(src)
		}
	}
	if r.Heartbeat != nil {
		wake := make(chan event.TypedGenericEvent[*fencingv1alpha1.FencedLease], 1024)
		b = b.WatchesRawSource(source.Channel(wake, &handler.TypedEnqueueRequestForObject[*fencingv1alpha1.FencedLease]{}))
		if err := mgr.Add(&heartbeatRunner{r: r, wake: wake}); err != nil {
			return fmt.Errorf("add the heartbeat: %w", err)
		}
	}
	return b.Complete(r)
}

// defaults fills in what was left unset, once, before the first reconcile.
func (r *Reconciler) defaults() {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.PendingGrace <= 0 {
		r.PendingGrace = DefaultPendingGrace
	}
	if r.Workers <= 0 {
		r.Workers = DefaultWorkers
	}
	r.mem = newMemories(r.Clock)
	r.pace = newPacer(r.Workers)
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
