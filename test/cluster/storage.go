package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/fencedlease/fencedlease/internal/setup"
)

// storeClient is an etcd client of the HA cluster's members, and the decoder
// of what the API servers store.
type storeClient struct {
	// closed is set once the client is closed: its watches end then
	// without a gap.
	closed  atomic.Bool
	once    sync.Once
	cli     *clientv3.Client
	err     error
	decoder runtime.Decoder
}

func (s *storeClient) close() {
	s.closed.Store(true)
	if s.cli != nil {
		s.cli.Close()
	}
}

// storeClientOf returns the cluster's etcd client, made when first needed.
func (c *Cluster) storeClientOf() (*storeClient, error) {
	c.specsMu.Lock()
	if c.ha.store == nil {
		c.ha.store = &storeClient{}
	}
	s := c.ha.store
	c.specsMu.Unlock()
	s.once.Do(func() {
		s.cli, s.err = clientv3.New(clientv3.Config{Endpoints: c.ha.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		s.decoder = serializer.NewCodecFactory(setup.Scheme()).UniversalDeserializer()
	})
	if s.err != nil {
		return nil, fmt.Errorf("etcd client: %w", s.err)
	}
	return s, nil
}

// registryPrefix is where the API servers keep each kind (their default
// --etcd-prefix is /registry).
var registryPrefix = map[string]string{
	"Pod":         "/registry/pods/",
	"ConfigMap":   "/registry/configmaps/",
	"FencedLease": "/registry/fencing.fencedlease.io/fencedleases/",
}

// FollowStorage is testenv.Follow read from etcd itself rather than from an
// API server: it lists the kind in the namespace from the store, hands every
// item to handle as Added, then every change from that revision on, in the
// order etcd applied them, each object with its resourceVersion (its etcd
// revision). The etcd client fails over between the members and resumes its
// watch from the last revision it delivered, so the history survives what
// an API server's watch does not: an API server restarted or cut off, whose
// fresh watch cache cannot resume an older resourceVersion. A watch that
// cannot resume (its revision compacted) calls gap and stops.
//
// The objects are decoded as the API servers stored them: protobuf for
// Pods and ConfigMaps, JSON for FencedLeases.
func (c *Cluster) FollowStorage(ctx context.Context, ns string, list client.ObjectList, gap func(), handle func(watch.EventType, runtime.Object)) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	s, err := c.storeClientOf()
	if err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(list, setup.Scheme())
	if err != nil {
		return err
	}
	kind := strings.TrimSuffix(gvk.Kind, "List")
	base, ok := registryPrefix[kind]
	if !ok {
		return fmt.Errorf("follow %s from storage: unknown kind", gvk.Kind)
	}
	prefix := base + ns + "/"
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list %s in %s from etcd: %w", kind, ns, err)
	}
	for _, kv := range resp.Kvs {
		obj, err := s.decode(kv.Value, kv.ModRevision)
		if err != nil {
			return fmt.Errorf("%s: %w", kv.Key, err)
		}
		handle(watch.Added, obj)
	}
	wch := s.cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithPrevKV())
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					if ctx.Err() == nil && !s.closed.Load() {
						gap()
					}
					return
				}
				for _, ev := range wr.Events {
					t, value := watch.Modified, ev.Kv.Value
					switch {
					case ev.Type == clientv3.EventTypeDelete:
						if ev.PrevKv == nil {
							gap()
							continue
						}
						t, value = watch.Deleted, ev.PrevKv.Value
					case ev.IsCreate():
						t = watch.Added
					}
					obj, err := s.decode(value, ev.Kv.ModRevision)
					if err != nil {
						gap()
						continue
					}
					handle(t, obj)
				}
			}
		}
	}()
	return nil
}

// decode decodes a stored object and gives it its resourceVersion, which
// the API server does not store: the revision of the write.
func (s *storeClient) decode(data []byte, rev int64) (runtime.Object, error) {
	obj, _, err := s.decoder.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(fmt.Sprint(rev))
	return obj, nil
}

// AdvanceRevision writes a scratch key outside the API servers' prefix until
// etcd's revision is at least rev: what the rest of a real cluster's writes
// (node heartbeats, events) do, without touching any object.
func (c *Cluster) AdvanceRevision(ctx context.Context, rev int64) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	s, err := c.storeClientOf()
	if err != nil {
		return err
	}
	for {
		resp, err := s.cli.Put(ctx, "/fencedlease-test/scratch", "x")
		if err != nil {
			return fmt.Errorf("put a scratch key: %w", err)
		}
		if resp.Header.Revision >= rev {
			return nil
		}
	}
}
