package fencedcontroller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// DefaultShardPoll is how often a sharded manager reads its shards file
// again besides on every change it is told of.
const DefaultShardPoll = time.Second

// ShardedOptions configure NewShardedManager.
type ShardedOptions struct {
	// Set is the FencedShardSet whose shards the pod shares with the
	// set's other pods.
	Set string
	// Namespace is the set's namespace, the pod's; $POD_NAMESPACE or the
	// in-cluster namespace when empty. Only objects of this namespace can
	// be written: the fencing webhook protects an object by a set of its
	// own namespace.
	Namespace string
	// ShardOf gives each object's shard: ShardByName, ShardByLabel, or
	// the application's own. An object already labelled with a shard of
	// the set keeps it, whatever ShardOf says (LabelledFirst).
	ShardOf ShardOf
	// Dir holds the shards file (fence.ShardsFile); fence.DefaultDir when
	// empty, where the operator projects it.
	Dir string
	// Poll is how often the shards file is read again besides on every
	// change; DefaultShardPoll when zero.
	Poll time.Duration
	// FieldManager is as in Options.
	FieldManager string
}

func (o ShardedOptions) withDefaults(cfg *rest.Config) (ShardedOptions, error) {
	if o.Set == "" {
		return o, errors.New("name the FencedShardSet: ShardedOptions.Set")
	}
	if o.ShardOf == nil {
		return o, fmt.Errorf("FencedShardSet %s: ShardedOptions.ShardOf is not set", o.Set)
	}
	o.ShardOf = LabelledFirst(o.Set, o.ShardOf)
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.Namespace == "" {
		ns, err := fence.InClusterNamespace()
		if err != nil {
			return o, fmt.Errorf("the pod's namespace: set ShardedOptions.Namespace or $POD_NAMESPACE: %w", err)
		}
		o.Namespace = ns
	}
	if o.Dir == "" {
		o.Dir = fence.DefaultDir
	}
	if o.Poll <= 0 {
		o.Poll = DefaultShardPoll
	}
	if o.FieldManager == "" {
		o.FieldManager = userAgentManager(cfg.UserAgent)
	}
	return o, nil
}

// ShardedManager is a controller-runtime manager run as one of the pods
// sharing the shards of a FencedShardSet. Its controllers run at once, on
// every pod; each reconciles only the objects of the shards its pod holds
// (Controller, or Predicate, Gained and Reconciler to build one), and its
// client (GetClient) writes only those, each with its shard's fence.
type ShardedManager struct {
	manager.Manager
	opts    ShardedOptions
	watcher *fence.ShardWatcher
	client  client.Client
	feed    *shardFeed
	log     logr.Logger
}

// NewShardedManager creates a manager for a pod of a FencedShardSet. opts
// are the options of a plain manager; their leader election must be off:
// every pod runs its controllers, on the shards it holds. The shards file
// must exist when it is called (the pod is labelled to have it projected).
func NewShardedManager(cfg *rest.Config, opts manager.Options, o ShardedOptions) (*ShardedManager, error) {
	if opts.LeaderElection || opts.LeaderElectionResourceLockInterface != nil {
		return nil, errors.New("a FencedShardSet's pods share its shards instead of electing a leader: turn manager.Options.LeaderElection off")
	}
	o, err := o.withDefaults(cfg)
	if err != nil {
		return nil, fmt.Errorf("sharded manager: %w", err)
	}
	inner, err := manager.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	w, err := fence.WatchShards(o.Dir, o.Poll)
	if err != nil {
		return nil, fmt.Errorf("sharded manager of FencedShardSet %s/%s: %w", o.Namespace, o.Set, err)
	}
	c, err := NewShardedClient(inner.GetClient(), ClientShardOptions{
		Set: o.Set, Namespace: o.Namespace, ShardOf: o.ShardOf, Held: w.Current, FieldManager: o.FieldManager,
		APIReader: inner.GetAPIReader(),
	})
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	log := inner.GetLogger().WithName("fencedlease").WithValues("fencedShardSet", klog.KRef(o.Namespace, o.Set))
	m := &ShardedManager{Manager: inner, opts: o, watcher: w, client: c, log: log}
	m.feed = &shardFeed{m: m}
	if err := inner.Add(m.feed); err != nil {
		_ = w.Close()
		return nil, err
	}
	return m, nil
}

// GetClient returns the sharded client (NewShardedClient).
func (m *ShardedManager) GetClient() client.Client { return m.client }

// Held returns the shards the pod holds, by its latest reading of its
// shards file.
func (m *ShardedManager) Held() fence.Shards { return m.watcher.Current() }

// Holds says whether obj belongs to a shard the pod holds now.
func (m *ShardedManager) Holds(obj client.Object) bool {
	if obj.GetNamespace() != m.opts.Namespace {
		return false
	}
	key, ok := m.opts.ShardOf(obj)
	if !ok {
		return false
	}
	f, ok := m.watcher.Current()[key]
	return ok && f > 0
}

// ShardOf is the manager's ShardOf.
func (m *ShardedManager) ShardOf(obj client.Object) (string, bool) { return m.opts.ShardOf(obj) }

// shardFeed runs on the manager: it follows the shards file and tells
// every Gained source of each shard gained (or granted again with a new
// fence), once the cache has synced; it closes the watcher when the
// manager stops.
type shardFeed struct {
	m *ShardedManager
	// sources are the Gained sources, registered before the manager
	// starts.
	sources []*gainedSource
}

func (f *shardFeed) NeedLeaderElection() bool { return false }

func (f *shardFeed) Start(ctx context.Context) error {
	defer func() { _ = f.m.watcher.Close() }()
	if !f.m.GetCache().WaitForCacheSync(ctx) {
		return nil
	}
	last := fence.Shards{}
	for {
		var now fence.Shards
		select {
		case <-ctx.Done():
			return nil
		case now = <-f.m.watcher.Changes():
		}
		for key, fenceValue := range now {
			if last[key] == fenceValue {
				continue
			}
			f.m.log.Info("Shard held", "shard", key, "fence", fenceValue)
			for _, s := range f.sources {
				s.gained(ctx, key)
			}
		}
		for key := range last {
			if _, ok := now[key]; !ok {
				f.m.log.Info("Shard no longer held", "shard", key)
			}
		}
		last = now
	}
}
