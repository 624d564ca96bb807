package fencedlease

import (
	"context"
	"sync"
)

// concurrently runs independent steps of one reconcile at once, each its
// own round trip to the API server, and returns when they all have. The
// steps must share nothing they write. A step that panics panics the
// reconcile once they all have returned, where controller-runtime
// recovers it, not on a goroutine of its own, which would end the process.
func (r *Reconciler) concurrently(ctx context.Context, steps ...func(context.Context)) {
	switch {
	case r.Concurrently != nil:
		r.Concurrently(ctx, steps...)
		return
	case len(steps) < 2:
		for _, step := range steps {
			step(ctx)
		}
		return
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked any
	)
	for _, step := range steps {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					panicked = p
					mu.Unlock()
				}
			}()
			step(ctx)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
