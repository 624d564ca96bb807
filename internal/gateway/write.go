package gateway

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/record"
)

// write admits a fenced write, then makes it conditional on the object's
// ETag after checking the fence stored with the object (a tombstone's
// too), and lets its last byte go only through the gate.
func (x *exchange) write(ctx context.Context, caller Caller) {
	op := x.op
	route, ok := x.s.o.Config.Route(op.Bucket, op.Key)
	if !ok {
		x.fail(http.StatusForbidden, CodeAccessDenied, ReasonNoRoute, "no route for "+op.Bucket+"/"+op.Key+": the gateway fences only routed keys")
		return
	}
	if op.Kind == CopyObject {
		src, ok := x.s.o.Config.Route(op.SourceBucket, op.SourceKey)
		if !ok || src.Namespace != caller.Namespace {
			x.fail(http.StatusForbidden, CodeAccessDenied, ReasonNoRoute,
				"copy source "+op.SourceBucket+"/"+op.SourceKey+" is not readable by user "+caller.Username+" through the gateway")
			return
		}
	}
	route, err := ShardRoute(route, op.Key)
	if err != nil {
		x.fail(http.StatusBadRequest, CodeNoSuchShard, ReasonNoShard, "write to "+op.Bucket+"/"+op.Key+" denied: "+err.Error())
		return
	}
	wr := Write{Route: route, Bucket: op.Bucket, Key: op.Key}
	key := op.Bucket + "/" + op.Key
	lock, ok := x.s.locks.tryLock(key)
	if !ok {
		// Another write to the key is in flight here. Judge this one
		// first: a refused write never waits, and a newer grant's write
		// preempts an older grant's upload rather than wait behind it.
		d, fl, _, ok := x.admit(ctx, wr, caller)
		if !ok {
			return
		}
		if lock, ok = x.wait(ctx, key, wr, d, fl); !ok {
			return
		}
	}
	defer lock.unlock()
	// The grant is read once the key is this request's: a write that
	// waited for another is judged on the grant as it is now.
	for range x.s.o.Attempts {
		c, ok := x.check(ctx, wr, caller)
		if !ok {
			return
		}
		x.log = x.log.WithValues("lock", route.Lock(), "fence", c.d.Fence)
		if done := x.attempt(ctx, lock, wr, caller, c); done {
			return
		}
	}
	x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonContention,
		fmt.Sprintf("other writers kept changing %s (%d attempts); send it again", wr, x.s.o.Attempts))
}

// admit reads the grant and decides whether the caller may write as its
// holder; a refusal is answered. It returns when the read began.
func (x *exchange) admit(ctx context.Context, wr Write, caller Caller) (Decision, client.Object, time.Time, bool) {
	start := time.Now()
	grant, fl, grantErr, err := x.s.o.Grants.Read(ctx, wr.Route)
	if err != nil {
		x.fail(http.StatusServiceUnavailable, CodeUnavailable, ReasonLeaseReadError, "cannot read "+wr.Route.Lock()+": "+err.Error())
		return Decision{}, nil, start, false
	}
	d := x.s.o.Rules.Admit(wr, caller, x.r.Header.Get(HeaderFence), grant, grantErr)
	if !d.Allowed {
		x.deny(d)
		x.report(d, fl)
		return d, fl, start, false
	}
	return d, fl, start, true
}

// wait waits for key's lock as the admitted write d. A PUT's body is read
// ahead meanwhile (a bounded part of it), so that a client that gave up is
// noticed and its request ends at once, freeing its in-flight slot.
func (x *exchange) wait(ctx context.Context, key string, wr Write, d Decision, fl client.Object) (*lockHandle, bool) {
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if x.op.Kind == PutObject {
		x.readAhead()
		go func() {
			select {
			case <-x.ahead.done:
				if x.ahead.err != nil {
					cancel()
				}
			case <-waitCtx.Done():
			}
		}()
	}
	lock, err := x.s.locks.lock(waitCtx, key, d.Fence, x.s.o.KeyLockTimeout)
	switch {
	case err == nil:
		return lock, true
	case x.ahead != nil && x.ahead.err != nil:
		x.failErr(clientBroken(x.ahead.err), fl)
	case ctx.Err() != nil:
		x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonContention, "the request ended while waiting for another write to "+wr.String())
	default:
		x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonContention,
			fmt.Sprintf("another write to %s has been in flight for longer than %s; send it again", wr, x.s.o.KeyLockTimeout))
	}
	return nil, false
}

// checked is what a write was judged on.
type checked struct {
	d  Decision
	fl client.Object
	st objectState
	// grantAt is when the Lease read that admitted the write began.
	grantAt time.Time
}

// check reads the grant and the object at once, and decides: the caller
// is the holder, the object's stored fence is not higher, the caller's own
// preconditions hold.
func (x *exchange) check(ctx context.Context, wr Write, caller Caller) (checked, bool) {
	var st objectState
	var headErr error
	read := make(chan struct{})
	go func() {
		defer close(read)
		st, headErr = x.s.o.Upstream.Head(ctx, x.op.Path())
	}()
	d, fl, start, ok := x.admit(ctx, wr, caller)
	<-read
	if !ok {
		return checked{}, false
	}
	if headErr != nil {
		x.failErr(headErr, fl)
		return checked{}, false
	}
	if d := x.s.o.Rules.CheckStored(wr, d.Fence, st.Fence); !d.Allowed {
		x.deny(d)
		x.report(d, fl)
		return checked{}, false
	}
	if msg := callerPreconditions(x.r.Header, st); msg != "" {
		x.fail(http.StatusPreconditionFailed, CodePrecondition, ReasonPrecondition, wr.String()+": "+msg)
		return checked{}, false
	}
	return checked{d: d, fl: fl, st: st, grantAt: start}, true
}

// attempt makes the conditional write once. It returns false when another
// writer won the store's precondition and the write may start over.
func (x *exchange) attempt(ctx context.Context, lock *lockHandle, wr Write, caller Caller, c checked) bool {
	upCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &gate{wr: wr, fence: c.d.Fence, cancel: cancel, interrupt: x.interruptBody, grantAt: c.grantAt, maxAge: x.s.o.GrantMaxAge,
		recheck: func(ctx context.Context) (time.Time, *Decision, error) {
			start := time.Now()
			grant, _, grantErr, err := x.s.o.Grants.Read(ctx, wr.Route)
			if err != nil {
				return start, nil, err
			}
			if d := x.s.o.Rules.Admit(wr, caller, x.r.Header.Get(HeaderFence), grant, grantErr); !d.Allowed {
				return start, &d, nil
			}
			return start, nil, nil
		}}
	lock.holding(c.d.Fence, g)
	defer lock.holding(0, nil)
	resp, tr, err := x.send(upCtx, g, c.st, c.d.Fence)
	if m := x.s.o.Metrics; m != nil && g.committed() {
		m.grantAge.Observe(g.age.Seconds())
		if g.rechecked {
			m.rechecks.Inc()
		}
	}
	if err == nil && resp == nil {
		// A DELETE of what is deleted already, with this fence: done.
		x.ended = &answer{resultAllowed, ReasonHolder}
		x.w.WriteHeader(http.StatusNoContent)
		return true
	}
	if tr != nil && tr.err != nil {
		// Stopped before the last byte: not written, whatever the store
		// said.
		if resp != nil {
			_ = resp.Body.Close()
		}
		x.failErr(tr.err, c.fl)
		return true
	}
	if err != nil {
		var he *httpError
		var ua *unavailable
		switch {
		case errors.As(err, &he), errors.As(err, &ua):
			x.failErr(err, c.fl)
		case !g.committed():
			x.fail(http.StatusServiceUnavailable, CodeUnavailable, ReasonUpstreamError,
				"the store did not take the write to "+wr.String()+" (nothing was written; send it again): "+err.Error())
		default:
			x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError,
				"the store did not answer the write to "+wr.String()+" (its outcome is unknown: read the object back): "+err.Error())
		}
		return true
	}
	if contention(resp) {
		if m := x.s.o.Metrics; m != nil {
			m.conflicts.Inc()
		}
		if x.op.Kind != PutObject || x.body == nil || x.body.n == 0 {
			return false
		}
		x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonContention,
			"another writer changed "+wr.String()+" while this write was sent (nothing was written); send it again")
		return true
	}
	if resp.StatusCode >= 300 {
		x.ended = &answer{resultError, ReasonUpstreamAnswer}
		relay(x.w, resp)
		return true
	}
	x.ended = &answer{resultAllowed, ReasonHolder}
	switch x.op.Kind {
	case DeleteObject:
		_ = resp.Body.Close()
		x.s.tombstones.put(normalizeETag(resp.Header.Get("ETag")), true)
		x.w.WriteHeader(http.StatusNoContent)
	case CopyObject:
		_ = resp.Body.Close()
		copyResult(x.w, resp)
	default:
		relay(x.w, resp)
	}
	return true
}

// contention reports whether the store refused a conditional write because
// the object changed since the gateway read it: 412, or S3's 409
// ConditionalRequestConflict (a concurrent conditional write). Other 409s
// are the store's own answer, relayed as they are. The body is kept for
// relaying.
func contention(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusPreconditionFailed:
		_ = resp.Body.Close()
		return true
	case http.StatusConflict:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		var e struct {
			Code string `xml:"Code"`
		}
		if xml.Unmarshal(body, &e) == nil && e.Code == "ConditionalRequestConflict" {
			return true
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return false
}

// send makes the conditional write: a PUT of the request's body, of the
// copy source's content, or of a tombstone. A nil response with no error
// is a DELETE of an object deleted already with this fence: nothing to
// write.
func (x *exchange) send(ctx context.Context, g *gate, st objectState, f int64) (*http.Response, *tailReader, error) {
	h := http.Header{}
	var src io.Reader
	var n int64
	broken := clientBroken
	switch x.op.Kind {
	case DeleteObject:
		if st.Deleted && st.Fence == record.FormatFence(f) {
			return nil, nil, nil
		}
		body := TombstoneBody(f)
		src, n = bytes.NewReader(body), int64(len(body))
		h.Set("Content-Type", "application/octet-stream")
		h.Set(HeaderMetaDeleted, "true")
	case CopyObject:
		resp, err := x.copySource(ctx, h)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		src, n, broken = resp.Body, resp.ContentLength, storeBroken
	default:
		body, length, err := x.requestBody()
		if err != nil {
			return nil, nil, err
		}
		src, n = body, length
		copyHeaders(h, x.r.Header, contentHeaders)
		userMetadata(h, x.r.Header)
		if ce := contentEncoding(x.r.Header.Get("Content-Encoding")); ce != "" {
			h.Set("Content-Encoding", ce)
		}
		if x.r.Header.Get("X-Amz-Trailer") == "" {
			for k, v := range x.r.Header {
				if strings.HasPrefix(k, "X-Amz-Checksum-") {
					h[k] = v
				}
			}
		}
	}
	if x.op.Kind != DeleteObject {
		copyHeaders(h, x.r.Header, writeHeaders)
		var err error
		if src, err = refuseReserved(src, n, broken); err != nil {
			return nil, nil, err
		}
	}
	h.Set(HeaderMetaFence, record.FormatFence(f))
	condition(h, st)
	tr := &tailReader{ctx: ctx, src: src, n: n, gate: g, broken: broken}
	var body io.Reader = tr
	if n == 0 {
		// Nothing to hold back: the gate decides before the request goes.
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return nil, tr, err
		}
		body = http.NoBody
	}
	resp, err := x.s.o.Upstream.Do(ctx, http.MethodPut, x.op.Path(), "", h, body, n)
	return resp, tr, err
}

// refuseReserved refuses content that is a tombstone's (of TombstoneSize
// bytes, read ahead to tell).
func refuseReserved(src io.Reader, n int64, broken func(error) error) (io.Reader, error) {
	if n != int64(TombstoneSize) {
		return src, nil
	}
	head := make([]byte, n)
	if k, err := io.ReadFull(src, head); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &bodyError{"IncompleteBody", fmt.Sprintf("the body ended after %d bytes, %d were announced", k, n)}
		}
		return nil, broken(err)
	}
	if reservedContent(head) {
		return nil, &httpError{http.StatusBadRequest, CodeInvalidArgument, ReasonBadBody,
			"this content is reserved: the fence gateway marks deleted objects with it (" + strings.TrimSpace(tombstonePrefix) + " …)"}
	}
	return io.MultiReader(bytes.NewReader(head), src), nil
}

// requestBody is a PUT's content and length: an aws-chunked body is
// decoded (the gateway re-signs the request, so chunk signatures cannot be
// forwarded) and its trailing checksum checked.
func (x *exchange) requestBody() (io.Reader, int64, error) {
	r := x.r
	raw := x.clientBody()
	if isAWSChunked(r.Header.Get("X-Amz-Content-Sha256"), r.Header.Get("Content-Encoding")) {
		n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
		if err != nil || n < 0 {
			return nil, 0, &httpError{http.StatusLengthRequired, "MissingContentLength", ReasonBadRequest,
				"an aws-chunked body needs a valid x-amz-decoded-content-length"}
		}
		d, err := newDechunker(raw, r.Header.Get("X-Amz-Trailer"))
		if err != nil {
			return nil, 0, &httpError{http.StatusBadRequest, CodeInvalidArgument, ReasonBadRequest, err.Error()}
		}
		return d, n, nil
	}
	if r.ContentLength < 0 {
		return nil, 0, &httpError{http.StatusLengthRequired, "MissingContentLength", ReasonBadRequest, "a PUT needs a Content-Length"}
	}
	return raw, r.ContentLength, nil
}

// copySource opens the copy source (404 when it is absent or a
// tombstone) and sets the destination's headers from it.
func (x *exchange) copySource(ctx context.Context, h http.Header) (*http.Response, error) {
	sh := http.Header{}
	for _, n := range []string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"} {
		if v := x.r.Header.Get("X-Amz-Copy-Source-" + n); v != "" {
			sh.Set(n, v)
		}
	}
	src, err := x.s.o.Upstream.Do(ctx, http.MethodGet, EscapePath(x.op.SourceBucket, x.op.SourceKey), "", sh, nil, 0)
	if err != nil {
		return nil, &unavailable{"the store did not answer the read of the copy source (nothing was written): " + err.Error()}
	}
	if src.StatusCode != http.StatusOK || isTombstone(src.Header) {
		_ = src.Body.Close()
		status, code, reason := http.StatusNotFound, CodeNoSuchKey, ReasonMissingResource
		switch {
		case src.StatusCode == http.StatusPreconditionFailed || src.StatusCode == http.StatusNotModified:
			status, code, reason = src.StatusCode, CodePrecondition, ReasonPrecondition
		case src.StatusCode != http.StatusOK && src.StatusCode != http.StatusNotFound:
			status, code, reason = src.StatusCode, CodeUnavailable, ReasonUpstreamAnswer
		}
		return nil, &httpError{status, code, reason,
			fmt.Sprintf("copy source %s/%s: the store answered %s", x.op.SourceBucket, x.op.SourceKey, statusOf(src))}
	}
	if strings.EqualFold(x.r.Header.Get("X-Amz-Metadata-Directive"), "REPLACE") {
		copyHeaders(h, x.r.Header, contentHeaders)
		userMetadata(h, x.r.Header)
	} else {
		copyHeaders(h, src.Header, contentHeaders)
		copyHeaders(h, src.Header, []string{"Content-Encoding"})
		userMetadata(h, src.Header)
	}
	return src, nil
}

func statusOf(resp *http.Response) string {
	if isTombstone(resp.Header) {
		return "404 Not Found (deleted)"
	}
	return resp.Status
}

// failErr answers an error found on the way to the store.
func (x *exchange) failErr(err error, fl client.Object) {
	var r *refusal
	var be *bodyError
	var he *httpError
	var sr *storeRefusal
	var ua *unavailable
	switch {
	case errors.As(err, &r):
		x.deny(r.d)
		x.report(r.d, fl)
	case errors.As(err, &be):
		x.fail(http.StatusBadRequest, be.code, ReasonBadBody, be.msg)
	case errors.As(err, &he):
		x.fail(he.status, he.code, he.reason, he.msg)
	case errors.As(err, &sr):
		code := CodeInvalidRequest
		if sr.status == http.StatusForbidden {
			code = CodeAccessDenied
		}
		x.fail(sr.status, code, ReasonUpstreamAnswer, sr.msg)
	case errors.As(err, &ua):
		x.fail(http.StatusServiceUnavailable, CodeUnavailable, ReasonUpstreamError, ua.msg)
	default:
		x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError, err.Error())
	}
}
