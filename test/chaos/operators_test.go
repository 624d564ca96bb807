//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// replica is one operator process, with the switches its client's fault
// wrapper reads.
type replica struct {
	name string
	m    *testenv.Manager
	// lag freezes the replica's cached reads of some kinds (read lag).
	lag *testenv.Lag
	// hookLag freezes the fencing webhook's cache of FencedLeases, on the
	// primary, which serves the webhooks.
	hookLag *testenv.Lag
}

// operators runs the operator: a primary that serves the webhooks (the API
// server calls one address) and, for a while at times, a second replica
// with the controller only, without leader election. Both write through a
// client that can lose the replies of Lease and status writes after the API
// server applied them, and whose cached reads can freeze.
type operators struct {
	ctx      context.Context
	cfg      *rest.Config
	ns       string
	webhooks *envtest.WebhookInstallOptions
	options  setup.WebhookOptions
	rec      *Recorder
	// configFor, if set, is the configuration of the n-th replica started,
	// made from cfg (the control plane's choice of API server).
	configFor func(base *rest.Config, n int, primary bool) *rest.Config
	// registerPrimary, if set, adds to every primary's manager (the one
	// whose cache the webhooks read).
	registerPrimary func(ctrl.Manager) error

	// lossy, while above zero (faults overlap), makes every replica lose
	// the replies of its Lease and status writes with probability one
	// half, decided by rng.
	lossy atomic.Int32
	rngMu sync.Mutex
	rng   *rand.Rand

	mu                 sync.Mutex
	primary, secondary *replica
	started            int
	// restarting is set while the primary is down: one crash at a time,
	// or a second restart would find the webhook port taken.
	restarting bool
}

func newOperators(ctx context.Context, cfg *rest.Config, ns string, webhooks *envtest.WebhookInstallOptions, opts setup.WebhookOptions, rec *Recorder, seed int64) *operators {
	return &operators{ctx: ctx, cfg: cfg, ns: ns, webhooks: webhooks, options: opts, rec: rec, rng: rand.New(rand.NewPCG(uint64(seed), 2))}
}

// start runs a replica; the primary serves the webhooks.
func (o *operators) start(primary bool) (*replica, error) {
	o.mu.Lock()
	o.started++
	r := &replica{name: fmt.Sprintf("operator-%d", o.started)}
	cfg := o.cfg
	if o.configFor != nil {
		cfg = o.configFor(o.cfg, o.started, primary)
	}
	o.mu.Unlock()
	// Every replica renews the operator's heartbeat, as the command does: it
	// vouches for the grants of renewal Operator, which are then written
	// only when they change and at their refresh, here every 10 s.
	heartbeat := &fencedlease.Heartbeat{Namespace: o.ns, Name: fencedlease.DefaultHeartbeatName,
		Interval: 250 * time.Millisecond, Refresh: 10 * time.Second, Identity: r.name}
	opts := testenv.ManagerOptions{Namespace: o.ns, ReportProtection: true, WebhookOptions: o.options,
		Options: setup.Options{WrapClient: func(c client.Client) client.Client { return o.wrap(r, c) }, Heartbeat: heartbeat}}
	if primary {
		opts.Webhooks = o.webhooks
		opts.WebhookOptions.WrapCache = func(c client.Client) client.Reader {
			r.hookLag = testenv.NewLag(c)
			return r.hookLag
		}
		opts.Register = o.registerPrimary
	}
	var err error
	// The webhook port of a crashed primary may take a moment to be free.
	for i := 0; i < 5; i++ {
		if r.m, err = testenv.StartManager(o.ctx, cfg, opts); err == nil {
			return r, nil
		}
		time.Sleep(time.Second)
	}
	return nil, fmt.Errorf("start %s: %w", r.name, err)
}

// startPrimary starts the first primary.
func (o *operators) startPrimary() error {
	r, err := o.start(true)
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.primary = r
	o.mu.Unlock()
	return nil
}

// crashPrimary crashes the primary (its webhooks go with it: protected
// writes fail closed meanwhile), waits down, and starts a new one that knows
// only what is stored. It reports false when the primary is already down.
func (o *operators) crashPrimary(down time.Duration) (bool, error) {
	o.mu.Lock()
	if o.restarting {
		o.mu.Unlock()
		return false, nil
	}
	o.restarting = true
	old := o.primary
	o.primary = nil
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.restarting = false
		o.mu.Unlock()
	}()
	if old != nil {
		old.m.Crash()
		old.m.Wait()
	}
	sleep(o.ctx, down)
	r, err := o.start(true)
	if err != nil {
		return true, err
	}
	o.mu.Lock()
	o.primary = r
	o.mu.Unlock()
	return true, nil
}

// runSecondary runs a second replica for d, then crashes it. It reports
// false when one already runs.
func (o *operators) runSecondary(d time.Duration) (bool, error) {
	o.mu.Lock()
	if o.secondary != nil {
		o.mu.Unlock()
		return false, nil
	}
	o.secondary = &replica{name: "starting"}
	o.mu.Unlock()
	r, err := o.start(false)
	o.mu.Lock()
	o.secondary = r
	o.mu.Unlock()
	if err != nil {
		return true, err
	}
	sleep(o.ctx, d)
	o.mu.Lock()
	o.secondary = nil
	o.mu.Unlock()
	r.m.Crash()
	r.m.Wait()
	return true, nil
}

// replicas returns the replicas running now.
func (o *operators) replicas() []*replica {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*replica
	for _, r := range []*replica{o.primary, o.secondary} {
		if r != nil && r.m != nil {
			out = append(out, r)
		}
	}
	return out
}

// stop stops every replica at the end of the run.
func (o *operators) stop() {
	for _, r := range o.replicas() {
		r.m.Crash()
		r.m.Wait()
	}
}

// wrap is the WrapClient of a replica: reads through a Lag, writes through
// an interceptor that loses replies.
func (o *operators) wrap(r *replica, c client.Client) client.Client {
	r.lag = testenv.NewLag(c)
	return testenv.Intercept(r.lag, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return o.maybeLose(obj, "", cl.Create(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return o.maybeLose(obj, "", cl.Update(ctx, obj, opts...))
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return o.maybeLose(obj, sub, cl.SubResource(sub).Patch(ctx, obj, patch, opts...))
		},
	})
}

// maybeLose turns the success of a Lease write or a FencedLease status
// patch into a timeout while replies are lost: the write was applied, the
// operator does not know it.
func (o *operators) maybeLose(obj client.Object, sub string, err error) error {
	if err != nil || o.lossy.Load() <= 0 {
		return err
	}
	kind := ""
	switch obj.(type) {
	case *coordinationv1.Lease:
		kind = "lease"
	case *fencingv1alpha1.FencedLease:
		if sub == "status" {
			kind = "status"
		}
	}
	if kind == "" {
		return nil
	}
	o.rngMu.Lock()
	lose := o.rng.Float64() < 0.5
	o.rngMu.Unlock()
	if !lose {
		return nil
	}
	o.rec.Fault("lost-reply:"+kind, obj.GetName())
	return apierrors.NewTimeoutError("chaos: the reply to this write was lost after it was applied", 1)
}

// lagKinds are what a replica's reads may freeze on.
var lagKinds = []func() client.ObjectList{
	func() client.ObjectList { return &coordinationv1.LeaseList{} },
	func() client.ObjectList { return &corev1.PodList{} },
	func() client.ObjectList { return &fencingv1alpha1.FencedLeaseList{} },
}

// freeze freezes the cached reads of a kind on a replica for d.
func (o *operators) freeze(r *replica, kind int, d time.Duration) error {
	list := lagKinds[kind]()
	if err := r.lag.Freeze(o.ctx, list); err != nil {
		return fmt.Errorf("freeze reads of %s: %w", r.name, err)
	}
	sleep(o.ctx, d)
	r.lag.Thaw(lagKinds[kind]())
	return nil
}

// freezeWebhook freezes the fencing webhook's cache of FencedLeases on the
// primary for d.
func (o *operators) freezeWebhook(d time.Duration) (bool, error) {
	o.mu.Lock()
	r := o.primary
	o.mu.Unlock()
	if r == nil || r.hookLag == nil {
		return false, nil
	}
	if err := r.hookLag.Freeze(o.ctx, &fencingv1alpha1.FencedLeaseList{}); err != nil {
		return true, fmt.Errorf("freeze the webhook's cache of %s: %w", r.name, err)
	}
	sleep(o.ctx, d)
	r.hookLag.Thaw(&fencingv1alpha1.FencedLeaseList{})
	return true, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
