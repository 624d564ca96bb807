package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// shardsCommand is fence shards: one CMD per shard this pod owns, started
// with the shard's key and fence, stopped (SIGTERM, then SIGKILL after the
// grace period) as soon as the shard leaves the pod or its fence changes,
// and started again with the new fence. A CMD that exits while its shard
// stays is started again, as a kubelet restarts a container: after
// --restart-delay, doubled on every exit that comes sooner than
// restartReset after its start, up to maxRestartDelay. SIGTERM or SIGINT
// stops every CMD and then fence shards.
func shardsCommand(args []string, stderr io.Writer) (int, error) {
	fs, dir := newFlags("shards", stderr)
	grace := fs.Duration("grace-period", 10*time.Second, "time between SIGTERM and SIGKILL when a shard is lost")
	poll := fs.Duration("poll-interval", fence.DefaultPollInterval, "how often the shards file is re-read in case an event was missed")
	restart := fs.Duration("restart-delay", time.Second, "time before a command that exited is started again while its shard stays (doubled on quick exits, up to "+maxRestartDelay.String()+")")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	for name, d := range map[string]time.Duration{"grace-period": *grace, "poll-interval": *poll, "restart-delay": *restart} {
		if err := positiveDuration(name, d); err != nil {
			return exitUsage, err
		}
	}
	if fs.NArg() == 0 {
		return exitUsage, &usageError{"shards: missing command after --"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w, err := fence.WatchShards(*dir, *poll)
	if err != nil {
		return exitFailure, fmt.Errorf("shards: %w", err)
	}
	defer w.Close()
	err = w.ShardContexts(ctx, func(sctx context.Context, key string, f int64) {
		superviseShard(sctx, fs.Args(), key, f, *grace, *restart, stderr)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return exitFailure, fmt.Errorf("shards: %w", err)
	}
	return 0, nil
}

const (
	// maxRestartDelay bounds the delay before a command is started again.
	maxRestartDelay = time.Minute
	// restartReset is how long a command must run for its next restart to
	// wait only --restart-delay again.
	restartReset = 30 * time.Second
)

// superviseShard runs argv for one shard grant until ctx ends (the shard
// left the pod, its fence changed, or fence shards is stopping), starting
// it again after each exit with a growing delay.
func superviseShard(ctx context.Context, argv []string, key string, f int64, grace, restart time.Duration, stderr io.Writer) {
	delay := restart
	for {
		started := time.Now()
		runShard(ctx, argv, key, f, grace, stderr)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) >= restartReset {
			delay = restart
		}
		fmt.Fprintf(stderr, "fence shards: shard %s: command exited while the shard stays; starting it again in %s\n", key, delay)
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), fence.ErrLost) {
				fmt.Fprintf(stderr, "fence shards: shard %s: fence %d lost, not started again\n", key, f)
			}
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRestartDelay)
	}
}

// runShard runs argv for one shard grant until it exits or ctx ends; then
// SIGTERM, and SIGKILL after grace.
func runShard(ctx context.Context, argv []string, key string, f int64, grace time.Duration, stderr io.Writer) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "FENCE_SHARD="+key, fmt.Sprintf("FENCE_TOKEN=%d", f))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = grace
	fmt.Fprintf(stderr, "fence shards: shard %s: starting with fence %d\n", key, f)
	err := cmd.Run()
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, fence.ErrLost):
		fmt.Fprintf(stderr, "fence shards: shard %s: fence %d lost, stopped (%v)\n", key, f, err)
	case err != nil:
		fmt.Fprintf(stderr, "fence shards: shard %s: %v\n", key, err)
	default:
		fmt.Fprintf(stderr, "fence shards: shard %s: command exited with status 0\n", key)
	}
}
