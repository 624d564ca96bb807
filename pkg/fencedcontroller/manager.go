package fencedcontroller

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ErrLeaderElectionLost is what Manager.Start returns, wrapped with the
// reason, when this pod's grant ended while its controllers ran: as
// controller-runtime's manager returns "leader election lost", so that the
// program exits (controllers cannot be started twice) and its pod, started
// again, is a candidate again.
var ErrLeaderElectionLost = errors.New("leader election lost")

// NewManager creates a controller-runtime manager that runs as a candidate
// of a FencedLease instead of using leader election: everything that would
// run only on the elected leader (the runnables that need leader election:
// controllers, by default) starts only once this pod holds a grant of the
// FencedLease (with renewal Holder, after its own first renewal) and stops
// at its own deadline; see the package documentation.
//
// opts are the options of a plain manager; their leader election must be
// off. The returned manager's GetClient is the fencing client (NewClient)
// around the usual one: it writes only while the controllers run under a
// grant, and stamps that grant's fence on every write of a protected
// object.
func NewManager(cfg *rest.Config, opts manager.Options, o Options) (manager.Manager, error) {
	if opts.LeaderElection || opts.LeaderElectionResourceLockInterface != nil {
		return nil, errors.New("a FencedLease candidate replaces leader election: turn manager.Options.LeaderElection off")
	}
	o, err := o.withDefaults(cfg)
	if err != nil {
		return nil, fmt.Errorf("FencedLease candidate: %w", err)
	}
	inner, err := manager.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	c := newCandidate(o, inner.GetLogger().WithName("fencedlease").WithValues("fencedLease", klog.KRef(o.Namespace, o.Lease)))
	if err := inner.Add(c); err != nil {
		return nil, err
	}
	return &fencedManager{
		Manager:   inner,
		candidate: c,
		client:    NewClient(inner.GetClient(), heldGrant{c}, ClientOptions{FieldManager: o.FieldManager}),
	}, nil
}

// fencedManager is a manager whose leader-election runnables the candidate
// runs, and whose client fences its writes.
type fencedManager struct {
	manager.Manager
	candidate *candidate
	client    client.Client
}

// Add runs r on the candidate's grant if it needs leader election (the
// manager's own rule), and on the manager otherwise. A runnable that warms
// up before it is elected (a controller with warmup enabled) warms up on
// the manager at once, as it would with leader election.
func (m *fencedManager) Add(r manager.Runnable) error {
	if !needsLeader(r) {
		return m.Manager.Add(r)
	}
	if w, ok := r.(warmup); ok {
		if err := m.Manager.Add(warmupOnly{w}); err != nil {
			return err
		}
	}
	return m.candidate.add(r)
}

// Elected is closed once this pod holds a grant and its controllers start.
func (m *fencedManager) Elected() <-chan struct{} { return m.candidate.elected }

// GetClient returns the fencing client.
func (m *fencedManager) GetClient() client.Client { return m.client }

// needsLeader says whether controller-runtime's manager would run r only
// on the elected leader: the same rule as its runnable groups (caches and
// webhook servers never; a LeaderElectionRunnable as it says; anything
// else does).
func needsLeader(r manager.Runnable) bool {
	switch r := r.(type) {
	case interface{ GetCache() cache.Cache }:
		return false
	case webhook.Server:
		return false
	case manager.LeaderElectionRunnable:
		return r.NeedLeaderElection()
	}
	return true
}

// warmup is a runnable that can warm up before it is elected
// (controller-runtime's own interface is unexported).
type warmup interface {
	Warmup(ctx context.Context) error
}

// warmupOnly runs the warmup of a runnable on the manager, unelected.
type warmupOnly struct{ w warmup }

func (w warmupOnly) Start(ctx context.Context) error { return w.w.Warmup(ctx) }

func (warmupOnly) NeedLeaderElection() bool { return false }
