package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
)

func TestReadShards(t *testing.T) {
	k, err := fencetest.NewKubeletWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Write(map[string]string{fence.ShardsFile: `{"3":"41210","eu":"9"}`}); err != nil {
		t.Fatal(err)
	}
	got, err := fence.ReadShards(k.Dir())
	if err != nil || len(got) != 2 || got["3"] != 41210 || got["eu"] != 9 {
		t.Fatalf("ReadShards = %v, %v", got, err)
	}
	if err := k.Write(map[string]string{fence.ShardsFile: ""}); err != nil {
		t.Fatal(err)
	}
	if got, err := fence.ReadShards(k.Dir()); err != nil || len(got) != 0 {
		t.Fatalf("an empty file: ReadShards = %v, %v; want no shard", got, err)
	}
	if err := k.Write(map[string]string{fence.ShardsFile: `{"3":"041210"}`}); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.ReadShards(k.Dir()); !errors.Is(err, fence.ErrMalformed) {
		t.Fatalf("a fence with a leading zero: err = %v, want ErrMalformed", err)
	}
	if _, err := fence.ReadShards(t.TempDir()); !errors.Is(err, fence.ErrAbsent) {
		t.Fatalf("no file: err = %v, want ErrAbsent", err)
	}
}

// Each shard runs in a context of its own, which ends with ErrLost when the
// shard leaves the pod or comes back with another fence; the shards that
// stay are not disturbed.
func TestShardContexts(t *testing.T) {
	k, err := fencetest.NewKubeletWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(v string) {
		t.Helper()
		if err := k.Write(map[string]string{fence.ShardsFile: v}); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"a":"10","b":"11"}`)
	w, err := fence.WatchShards(k.Dir(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	type run struct {
		key   string
		fence int64
		ended chan error
	}
	started := make(chan run, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = w.ShardContexts(ctx, func(ctx context.Context, key string, f int64) {
			r := run{key, f, make(chan error, 1)}
			started <- r
			<-ctx.Done()
			r.ended <- context.Cause(ctx)
		})
	}()
	first := map[string]run{}
	for range 2 {
		r := <-started
		first[r.key] = r
	}
	if first["a"].fence != 10 || first["b"].fence != 11 {
		t.Fatalf("started %v, want a@10 and b@11", first)
	}
	write(`{"a":"10","b":"12","c":"13"}`)
	for range 2 {
		r := <-started
		switch {
		case r.key == "b" && r.fence == 12, r.key == "c" && r.fence == 13:
		default:
			t.Fatalf("started %s@%d, want b@12 and c@13", r.key, r.fence)
		}
	}
	select {
	case err := <-first["b"].ended:
		if !errors.Is(err, fence.ErrLost) {
			t.Fatalf("b@11 ended with %v, want ErrLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b@11 still runs after its fence changed")
	}
	select {
	case err := <-first["a"].ended:
		t.Fatalf("a@10 ended (%v) though it stayed", err)
	default:
	}
}
