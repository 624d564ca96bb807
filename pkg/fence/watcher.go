package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultPollInterval is how often a Watcher re-reads the files in case an
// inotify event was missed.
const DefaultPollInterval = 5 * time.Second

// Option configures a Watcher.
type Option func(*options)

type options struct {
	poll     time.Duration
	noNotify bool
}

// WithPollInterval sets how often the files are re-read regardless of
// events. With events disabled it is the detection latency.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) { o.poll = d }
}

// WithoutEvents disables inotify: the Watcher only polls. Useful on file
// systems without inotify, and to measure the fallback.
func WithoutEvents() Option {
	return func(o *options) { o.noNotify = true }
}

// Watcher follows the token files of one directory. Its methods are safe
// for concurrent use. Close it to release the inotify watch.
type Watcher struct {
	dir  string
	opts options
	f    follower

	mu      sync.Mutex
	tok     Token
	err     error
	changed chan struct{} // closed and replaced on every change
}

// New starts watching the token files in dir (normally DefaultDir). It
// fails with ErrAbsent when the files do not exist, because waiting for
// files that the operator never mounts would hang forever. If inotify
// cannot be set up, the Watcher falls back to polling.
func New(dir string, opts ...Option) (*Watcher, error) {
	o := options{poll: DefaultPollInterval}
	for _, opt := range opts {
		opt(&o)
	}
	if o.poll <= 0 {
		return nil, fmt.Errorf("poll interval %v: must be positive", o.poll)
	}
	tok, err := Read(dir)
	switch {
	case errors.Is(err, ErrAbsent):
		return nil, err
	case errors.Is(err, ErrUnstable):
		tok, err = Token{}, nil // the next event or tick reads again
	}
	w := &Watcher{dir: dir, opts: o, tok: tok, err: err, changed: make(chan struct{})}
	w.f.start(dir, !o.noNotify, o.poll, func() { _, _ = w.Current() })
	return w, nil
}

// Close stops watching. Holder contexts are cancelled with ErrClosed and
// waiting calls return it.
func (w *Watcher) Close() error { return w.f.close() }

// Current reads the files now and returns the token. It also updates what
// the Watcher's waiters see, so a call never returns an older state than
// they act on.
func (w *Watcher) Current() (Token, error) {
	tok, err := Read(w.dir)
	w.publish(tok, err)
	return tok, err
}

// WaitHolder blocks until this pod is the holder and returns its token. It
// returns an error when ctx ends, the Watcher is closed, or the files are
// absent or malformed (a misconfiguration that waiting would hide).
func (w *Watcher) WaitHolder(ctx context.Context) (Token, error) {
	select {
	case <-w.f.done:
		return Token{}, fmt.Errorf("wait for holdership: %w", ErrClosed)
	default:
	}
	_, _ = w.Current()
	for {
		r, changed := w.state()
		switch {
		case r.err != nil:
			return Token{}, r.err
		case r.tok.IsHolder():
			return r.tok, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Token{}, fmt.Errorf("wait for holdership: %w", context.Cause(ctx))
		case <-w.f.done:
			return Token{}, fmt.Errorf("wait for holdership: %w", ErrClosed)
		}
	}
}

// HolderContext waits like WaitHolder, then returns a context derived from
// ctx and the token it is bound to. The context is cancelled as soon as the
// files say this pod is no longer the holder, the fence (or lease) changes,
// the files become unreadable, or the Watcher is closed; context.Cause
// then wraps ErrLost or ErrClosed. A changed fence is a new grant: work of the
// old grant must stop even if this pod holds the new one.
//
// Cancel ctx to release the context's resources when the work is done.
func (w *Watcher) HolderContext(ctx context.Context) (context.Context, Token, error) {
	tok, err := w.WaitHolder(ctx)
	if err != nil {
		return nil, Token{}, err
	}
	hctx, cancel := context.WithCancelCause(ctx)
	go func() {
		cancel(w.watchLoss(hctx, tok))
	}()
	return hctx, tok, nil
}

// watchLoss blocks until tok stops being current and returns why.
func (w *Watcher) watchLoss(ctx context.Context, held Token) error {
	for {
		r, changed := w.state()
		switch {
		case r.err != nil:
			return fmt.Errorf("%w: %w", ErrLost, r.err)
		case !r.tok.IsHolder():
			return fmt.Errorf("%w: role is now %s", ErrLost, r.tok.Role)
		case r.tok.Fence != held.Fence:
			return fmt.Errorf("%w: fence changed from %d to %d", ErrLost, held.Fence, r.tok.Fence)
		case r.tok != held:
			return fmt.Errorf("%w: lease changed from %q to %q", ErrLost, held.Lease, r.tok.Lease)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-w.f.done:
			return ErrClosed
		}
	}
}

// reading is the outcome of one Read.
type reading struct {
	tok Token
	err error
}

// state returns the last reading and a channel closed on the next change.
func (w *Watcher) state() (reading, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return reading{w.tok, w.err}, w.changed
}

// publish records a reading and wakes waiters if it differs from the last.
// A transient ErrUnstable reading is not published: the change that caused
// it produces another event.
func (w *Watcher) publish(tok Token, err error) {
	if errors.Is(err, ErrUnstable) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if tok == w.tok && sameError(err, w.err) {
		return
	}
	w.tok, w.err = tok, err
	close(w.changed)
	w.changed = make(chan struct{})
}

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return (a == nil) == (b == nil)
	}
	return a.Error() == b.Error()
}
