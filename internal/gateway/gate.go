package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A write commits when its last byte reaches the store. The gateway holds
// that byte back until the body is complete and checked (its length, its
// trailing checksum) and the write may still commit: the grant that
// admitted it was read less than GrantMaxAge before (else it is read
// again), and no write of a newer grant to the same key has arrived in the
// meantime. Otherwise it aborts the upstream request: a store does not
// commit a body that ends short of its Content-Length, so nothing is
// written, and the caller gets an answer that says so.

// refusal is a write refused on its way: a Decision the caller gets.
type refusal struct{ d Decision }

func (r *refusal) Error() string { return r.d.Message }

// bodyError is a request body that cannot be written (the client's
// fault), found before its last byte went to the store: nothing was
// written.
type bodyError struct {
	code, msg string
}

func (e *bodyError) Error() string { return e.msg }

// unavailable is a failure of the API server or the store found before the
// last byte went to the store: nothing was written, retry.
type unavailable struct{ msg string }

func (e *unavailable) Error() string { return e.msg }

type gateState int

const (
	gateOpen gateState = iota
	gateCommitted
	gateAborted
)

// gate decides whether a write's last byte may go to the store.
type gate struct {
	wr     Write
	fence  int64
	mu     sync.Mutex
	state  gateState
	abort  error
	cancel context.CancelFunc
	// interrupt stops the reading of the client's body.
	interrupt func()
	// grantAt is when the Lease read that admitted the write began.
	grantAt time.Time
	maxAge  time.Duration
	// recheck reads the grant again: when that read began, and the
	// denial or the API server's error.
	recheck func(ctx context.Context) (time.Time, *Decision, error)
	// age is the grant's age when the last byte was let go, rechecked
	// whether it was read again.
	age       time.Duration
	rechecked bool
}

// preempt aborts the write, unless its last byte has gone: a write of a
// newer grant, with fence newer, to the same key is waiting.
func (g *gate) preempt(newer int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != gateOpen {
		return
	}
	g.state, g.abort = gateAborted, &refusal{Superseded(g.wr, g.fence, newer)}
	if g.interrupt != nil {
		g.interrupt()
	}
	if g.cancel != nil {
		g.cancel()
	}
}

// committed reports whether the last byte was let go: if the store's
// answer is lost, the outcome is unknown.
func (g *gate) committed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state == gateCommitted
}

// fail aborts the write with err, unless it committed.
func (g *gate) fail(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == gateAborted {
		return g.abort
	}
	if g.state == gateOpen {
		g.state, g.abort = gateAborted, err
	}
	return err
}

// commit lets the last byte go, or says why not.
func (g *gate) commit(ctx context.Context) error {
	g.mu.Lock()
	if g.state == gateAborted {
		g.mu.Unlock()
		return g.abort
	}
	g.mu.Unlock()
	if time.Since(g.grantAt) > g.maxAge {
		start, denial, err := g.recheck(ctx)
		switch {
		case err != nil:
			return g.fail(&unavailable{"cannot read the grant again before the write's last byte (nothing was written): " + err.Error()})
		case denial != nil:
			d := *denial
			d.Message += " (checked again before the write's last byte: nothing was written)"
			return g.fail(&refusal{d})
		case time.Since(start) > g.maxAge:
			return g.fail(&unavailable{fmt.Sprintf("the API server took %s to answer the grant's read before the write's last byte (nothing was written); retry",
				time.Since(start).Round(time.Millisecond))})
		}
		g.grantAt, g.rechecked = start, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == gateAborted {
		return g.abort
	}
	g.state, g.age = gateCommitted, time.Since(g.grantAt)
	return nil
}

// tailReader streams a body of exactly n bytes to the store and holds its
// last byte until the body has ended where it should (no byte more, a
// valid trailing checksum: the source's EOF says so) and the gate lets it
// go. Its first error is kept: after the upstream request fails, it tells
// why, and that nothing was written.
type tailReader struct {
	ctx  context.Context
	src  io.Reader
	n    int64
	sent int64
	gate *gate
	// broken makes a source's read error into the caller's answer.
	broken func(error) error
	tail   []byte
	done   bool
	err    error
}

// tailSize is how many bytes the gate holds back.
const tailSize = 1

func (t *tailReader) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if t.done {
		if len(t.tail) == 0 {
			return 0, io.EOF
		}
		k := copy(p, t.tail)
		t.tail = t.tail[k:]
		return k, nil
	}
	head := t.n - min(t.n, tailSize)
	if t.sent < head {
		k, err := t.src.Read(p[:min(int64(len(p)), head-t.sent)])
		t.sent += int64(k)
		switch {
		case errors.Is(err, io.EOF):
			return k, t.stop(&bodyError{"IncompleteBody", fmt.Sprintf("the body ended after %d bytes, %d were announced", t.sent, t.n)})
		case err != nil:
			return k, t.stop(t.broken(err))
		}
		return k, nil
	}
	t.tail = make([]byte, t.n-t.sent)
	if k, err := io.ReadFull(t.src, t.tail); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, t.stop(&bodyError{"IncompleteBody", fmt.Sprintf("the body ended after %d bytes, %d were announced", t.sent+int64(k), t.n)})
		}
		return 0, t.stop(t.broken(err))
	}
	if err := atEOF(t.src); err != nil {
		if errors.Is(err, errBodyTooLong) {
			return 0, t.stop(&bodyError{"InvalidRequest", fmt.Sprintf("the body holds more than the %d bytes announced", t.n)})
		}
		return 0, t.stop(t.broken(err))
	}
	if err := t.gate.commit(t.ctx); err != nil {
		t.err = err
		return 0, err
	}
	t.done = true
	return t.Read(p)
}

func (t *tailReader) stop(err error) error {
	t.err = t.gate.fail(err)
	return t.err
}

var errBodyTooLong = errors.New("body too long")

// atEOF checks that r has nothing more: nil at its EOF, errBodyTooLong
// when it has a byte more, or its error.
func atEOF(r io.Reader) error {
	var one [1]byte
	for range 100 {
		k, err := r.Read(one[:])
		if k > 0 {
			return errBodyTooLong
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// clientBody reads a request body within its deadlines: no more than idle
// without a byte, and all of it before end. When the body ends, the
// connection's deadline is lifted, so that the server's wait for the
// client's next request is not cut short while the store answers.
//
// A body can be interrupted (a newer grant's write preempts the upload):
// a read blocked on a stalled client returns at once, so the upstream
// request, whose transport waits for its body's read, ends with it.
type clientBody struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
	end  time.Time
	// interrupted is set by interrupt.
	interrupted *atomic.Bool
}

// errInterrupted is the read of a body whose write was stopped; the
// gate's own error says why.
var errInterrupted = errors.New("the write was stopped while its body was read")

func (b *clientBody) Read(p []byte) (int, error) {
	if b.idle > 0 || !b.end.IsZero() {
		d := b.end
		if b.idle > 0 && (d.IsZero() || time.Now().Add(b.idle).Before(d)) {
			d = time.Now().Add(b.idle)
		}
		_ = b.rc.SetReadDeadline(d)
	}
	// Checked after the deadline is set: an interrupt between the two
	// has set its own deadline in the past, or is seen here.
	if b.interrupted.Load() {
		_ = b.rc.SetReadDeadline(time.Now())
		return 0, errInterrupted
	}
	n, err := b.r.Read(p)
	if b.interrupted.Load() && err != nil {
		return n, errInterrupted
	}
	if err != nil && b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		why := fmt.Sprintf("sent nothing for %s", b.idle)
		if !b.end.IsZero() && !time.Now().Before(b.end) {
			why = "did not end in time"
		}
		return n, &bodyError{"RequestTimeout", "the request body " + why + " (nothing was written)"}
	}
	return n, err
}

// clientBroken makes a client body's read error into the caller's answer.
func clientBroken(err error) error {
	var be *bodyError
	switch {
	case errors.As(err, &be):
		return be
	case errors.Is(err, errBadChecksum):
		return &bodyError{"BadDigest", err.Error() + " (nothing was written)"}
	case errors.Is(err, errBadChunk):
		return &bodyError{"InvalidRequest", err.Error() + " (nothing was written)"}
	}
	return &bodyError{"IncompleteBody", "the request body could not be read: " + err.Error() + " (nothing was written)"}
}

// storeBroken makes a copy source's read error into the caller's answer.
func storeBroken(err error) error {
	return &unavailable{"the copy source's content broke off (nothing was written): " + err.Error()}
}

// readAheadSize bounds what a waiting write reads of its body ahead.
const readAheadSize = 64 << 10

// readAhead is the start of a request body, read while its write waits for
// its key: a client that gave up is noticed at once (a read error, or, once
// the whole body is read, the server's own watch of the connection).
type readAhead struct {
	buf  []byte
	err  error
	done chan struct{}
}

// readAhead starts reading the body ahead.
func (x *exchange) readAhead() {
	a := &readAhead{done: make(chan struct{})}
	x.ahead = a
	size := int64(readAheadSize)
	if x.r.ContentLength >= 0 {
		size = min(size, x.r.ContentLength)
	}
	body := x.deadlined()
	go func() {
		defer close(a.done)
		buf := make([]byte, size)
		n, err := io.ReadFull(body, buf)
		a.buf = buf[:n]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if x.r.ContentLength >= 0 {
				err = &bodyError{"IncompleteBody", fmt.Sprintf("the body ended after %d bytes, %d were announced (nothing was written)", n, x.r.ContentLength)}
			} else {
				err = nil
			}
		}
		a.err = err
	}()
}

// deadlined is the request body within its deadlines.
func (x *exchange) deadlined() io.Reader {
	b := &clientBody{r: x.r.Body, rc: http.NewResponseController(x.w), idle: x.s.o.BodyIdleTimeout, interrupted: &x.interrupted}
	if x.s.o.BodyTimeout > 0 {
		b.end = x.start.Add(x.s.o.BodyTimeout)
	}
	return b
}

// interruptBody makes a read of the request body, blocked or to come,
// return errInterrupted.
func (x *exchange) interruptBody() {
	x.interrupted.Store(true)
	_ = http.NewResponseController(x.w).SetReadDeadline(time.Now())
}

// clientBody is the request body as a write reads it: what was read ahead,
// then the rest, within the deadlines; bytes read are counted (a write
// that has read none may start over).
func (x *exchange) clientBody() io.Reader {
	if x.body != nil {
		return x.body
	}
	var r io.Reader
	switch a := x.ahead; {
	case a == nil:
		r = x.deadlined()
	case waitFor(a) != nil:
		r = errReader{a.err}
	default:
		r = io.MultiReader(bytes.NewReader(a.buf), x.deadlined())
	}
	x.body = &countingReader{r: r}
	return x.body
}

// waitFor waits for the read ahead to end and returns its error.
func waitFor(a *readAhead) error {
	<-a.done
	return a.err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
