package fence

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencedlease/fencedlease/internal/record"
)

// ShardsFile is the token file of a FencedShardSet's candidate pod: the
// shards the pod owns, with their fences, as a JSON object of key to fence.
const ShardsFile = "shards"

// Shards are the shards a pod owns, by key, each with its fence. A shard
// is listed only once its grant is committed, and is gone from the list
// once its grant is revoked.
type Shards map[string]int64

// ReadShards returns one consistent reading of the shards file in dir, as
// Read does for the token files. An empty file is no shard.
//
// Errors wrap ErrAbsent, ErrMalformed or ErrUnstable.
func ReadShards(dir string) (Shards, error) {
	return readConsistent(dir, "the shards file",
		func(from string) (Shards, error) { return readShardsFile(from, dir) },
		func() (Shards, error) { return readShardsFile(dir, dir) })
}

func readShardsFile(from, dir string) (Shards, error) {
	path := filepath.Join(dir, ShardsFile)
	b, err := os.ReadFile(filepath.Join(from, ShardsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, ErrAbsent)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	shards, err := record.ParseShards(string(b))
	if err != nil {
		return nil, malformed(dir, ShardsFile, err)
	}
	return shards, nil
}

// ShardWatcher follows a pod's shards file. Changes delivers every new set
// of shards (the latest when several came at once); a shard that left the
// set must no longer be written with its fence. Close it to stop.
type ShardWatcher struct {
	dir     string
	f       follower
	changes chan Shards

	mu   sync.Mutex
	last Shards
}

// WatchShards starts following the shards file in dir (normally
// DefaultDir), re-reading it on every change and every poll interval. It
// fails with ErrAbsent when the file does not exist, and ErrMalformed when
// it does not parse.
func WatchShards(dir string, poll time.Duration) (*ShardWatcher, error) {
	if poll <= 0 {
		return nil, fmt.Errorf("poll interval %v: must be positive", poll)
	}
	shards, err := ReadShards(dir)
	if err != nil && !errors.Is(err, ErrUnstable) {
		return nil, err
	}
	w := &ShardWatcher{dir: dir, changes: make(chan Shards, 1), last: shards}
	w.changes <- maps.Clone(shards)
	w.f.start(dir, true, poll, func() {
		if shards, err := ReadShards(w.dir); err == nil {
			w.offer(shards)
		}
	})
	return w, nil
}

// Current is the last set of shards read.
func (w *ShardWatcher) Current() Shards {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.last)
}

// Changes delivers the shards each time they change, starting with the
// shards read when the watcher started.
func (w *ShardWatcher) Changes() <-chan Shards { return w.changes }

// Close stops following the file.
func (w *ShardWatcher) Close() error { return w.f.close() }

// offer delivers shards if they differ from the last ones, replacing an
// undelivered older set.
func (w *ShardWatcher) offer(shards Shards) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if maps.Equal(shards, w.last) {
		return
	}
	w.last = shards
	select {
	case <-w.changes:
	default:
	}
	w.changes <- maps.Clone(shards)
}

// ShardContexts runs, for every shard the pod owns, a context that is
// cancelled with ErrLost as soon as the shard leaves the pod's set or its
// fence changes: start work on a shard with its context and fence, and
// stop when the context ends. start is called once per shard grant, each
// in a goroutine of its own. ShardContexts returns when ctx ends or the
// watcher is closed, once every start it called has returned.
func (w *ShardWatcher) ShardContexts(ctx context.Context, start func(ctx context.Context, key string, fence int64)) error {
	running := map[string]struct {
		fence  int64
		cancel context.CancelCauseFunc
	}{}
	var wg sync.WaitGroup
	defer func() {
		for _, r := range running {
			r.cancel(ErrClosed)
		}
		wg.Wait()
	}()
	for {
		var shards Shards
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.f.done:
			return ErrClosed
		case shards = <-w.changes:
		}
		for key, r := range running {
			if f, ok := shards[key]; !ok || f != r.fence {
				r.cancel(ErrLost)
				delete(running, key)
			}
		}
		for key, fence := range shards {
			if _, ok := running[key]; ok {
				continue
			}
			sctx, cancel := context.WithCancelCause(ctx)
			running[key] = struct {
				fence  int64
				cancel context.CancelCauseFunc
			}{fence, cancel}
			wg.Go(func() { start(sctx, key, fence) })
		}
	}
}
