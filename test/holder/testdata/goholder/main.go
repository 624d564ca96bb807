// Command goholder is a Go workload that holds its lease with pkg/fence
// itself, as the package documents: a Session with holder renewal, and a
// check of Current right before every side effect. It logs to $CHILD_LOG
// in the format of testdata/child, with its own pid:
//
//	start <ns> <fence> <pid>   it holds a grant (its first own renewal succeeded)
//	beat  <ns> <fence> <pid>   every $CHILD_BEAT (20ms) while Current says it
//	                           still holds that grant; <ns> is the time taken
//	                           just before Current was asked
//	stop  <ns> <fence> <pid>   the grant ended; it waits for the next one
//
// The Session's log goes to stderr with the prefix "fence: ", like fence
// run's. The pod's API access, token and namespace come from the in-cluster
// environment ($FENCE_SERVICEACCOUNT_DIR), the lease from $LEASE and the
// margin from $MARGIN.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goholder:", err)
		os.Exit(1)
	}
}

func run() error {
	f, err := os.OpenFile(os.Getenv("CHILD_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	pid := strconv.Itoa(os.Getpid())
	write := func(kind string, at time.Time, fenceValue int64) error {
		_, err := f.WriteString(kind + " " + strconv.FormatInt(at.UnixNano(), 10) + " " + strconv.FormatInt(fenceValue, 10) + " " + pid + "\n")
		return err
	}
	margin, err := time.ParseDuration(os.Getenv("MARGIN"))
	if err != nil {
		return fmt.Errorf("MARGIN: %w", err)
	}
	beat := 20 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("CHILD_BEAT")); err == nil && d > 0 {
		beat = d
	}
	ctx := context.Background()
	s, err := fence.NewSession(ctx, fence.SessionConfig{Lease: os.Getenv("LEASE"), Margin: margin,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "fence: "+format+"\n", args...) }})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		hctx, g, err := s.HolderContext(ctx)
		if err != nil {
			return err
		}
		if err := write("start", time.Now(), g.Fence); err != nil {
			return err
		}
		t := time.NewTicker(beat)
		for hctx.Err() == nil {
			select {
			case <-t.C:
			case <-hctx.Done():
				continue
			}
			now := time.Now()
			if !s.Valid(g) {
				break
			}
			if err := write("beat", now, g.Fence); err != nil {
				return err
			}
		}
		t.Stop()
		if err := write("stop", time.Now(), g.Fence); err != nil {
			return err
		}
	}
}
