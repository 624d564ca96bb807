package fencedcontroller

import (
	"context"
	"errors"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// term is the run of the runnables under one grant.
type term struct {
	grant  fence.Grant
	hctx   context.Context // ends with the grant (Session.HolderContext)
	ctx    context.Context // the runnables' context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	// failed receives the first error of a runnable.
	failed chan error
}

type fenceKey struct{}

func newTerm(hctx context.Context, g fence.Grant) *term {
	ctx, cancel := context.WithCancelCause(context.WithValue(hctx, fenceKey{}, g.Fence))
	return &term{grant: g, hctx: hctx, ctx: ctx, cancel: cancel, failed: make(chan error, 1)}
}

// FenceFromContext returns the fence of the grant under which the
// controllers of a NewManager manager run, from a context they were given
// (a reconcile's context derives from it): for a controller that records
// the fence it acted under, say in a status. Its writes through the
// manager's client are stamped already.
func FenceFromContext(ctx context.Context) (int64, bool) {
	f, ok := ctx.Value(fenceKey{}).(int64)
	return f, ok
}

// start runs r under the term.
func (t *term) start(r manager.Runnable) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if err := r.Start(t.ctx); err != nil && !errors.Is(err, context.Canceled) && t.ctx.Err() == nil {
			select {
			case t.failed <- err:
			default:
			}
		}
	}()
}

// stop cancels the runnables' context.
func (t *term) stop(why error) { t.cancel(why) }

// waitUntil waits for the runnables to return, until limit at the latest,
// and says whether they did.
func (t *term) waitUntil(limit time.Time) bool {
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(max(time.Until(limit), 0))
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}
