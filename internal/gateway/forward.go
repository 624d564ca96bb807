package gateway

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencedlease/fencedlease/internal/record"
)

// readHeaders are the request headers a read forwards.
var readHeaders = []string{"Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since",
	"X-Amz-Checksum-Mode", "X-Amz-Server-Side-Encryption-Customer-Algorithm", "X-Amz-Server-Side-Encryption-Customer-Key",
	"X-Amz-Server-Side-Encryption-Customer-Key-Md5"}

// contentHeaders are the object's own headers that a write stores.
var contentHeaders = []string{"Content-Type", "Cache-Control", "Content-Disposition", "Content-Language", "Expires"}

// writeHeaders are the other request headers a PUT forwards.
var writeHeaders = []string{"Content-Md5", "X-Amz-Storage-Class", "X-Amz-Tagging", "X-Amz-Website-Redirect-Location",
	"X-Amz-Server-Side-Encryption", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", "X-Amz-Server-Side-Encryption-Context",
	"X-Amz-Server-Side-Encryption-Customer-Algorithm", "X-Amz-Server-Side-Encryption-Customer-Key",
	"X-Amz-Server-Side-Encryption-Customer-Key-Md5"}

func copyHeaders(dst, src http.Header, names []string) {
	for _, n := range names {
		if v := src.Values(n); len(v) > 0 {
			dst[http.CanonicalHeaderKey(n)] = v
		}
	}
}

// userMetadata copies x-amz-meta-* headers, except the gateway's own.
func userMetadata(dst, src http.Header) {
	for k, v := range src {
		if strings.HasPrefix(k, "X-Amz-Meta-") && !strings.EqualFold(k, HeaderMetaFence) {
			dst[k] = v
		}
	}
}

// read forwards a GET or HEAD, signed by the gateway.
func (x *exchange) read(ctx context.Context) {
	h := http.Header{}
	copyHeaders(h, x.r.Header, readHeaders)
	resp, err := x.s.o.Upstream.Do(ctx, x.r.Method, x.op.Path(), x.r.URL.RawQuery, h, nil, 0)
	if err != nil {
		x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError, "the store did not answer: "+err.Error())
		return
	}
	x.ended = &answer{resultAllowed, ReasonRead}
	relay(x.w, resp)
}

// relay sends the store's answer back.
func relay(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if k == "Connection" || k == "Keep-Alive" || k == "Transfer-Encoding" {
			continue
		}
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// write admits a fenced write, then makes it conditional on the object's
// ETag after checking the fence stored with the object.
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
	wr := Write{Route: route, Bucket: op.Bucket, Key: op.Key}
	// The grant is read once the key is this request's: a write that waited
	// for another is judged on the grant as it is now.
	unlock := x.s.locks.lock(op.Bucket + "/" + op.Key)
	defer unlock()
	grant, fl, grantErr, err := x.s.o.Grants.Read(ctx, route)
	if err != nil {
		x.fail(http.StatusServiceUnavailable, CodeUnavailable, ReasonLeaseReadError, "cannot read FencedLease "+route.String()+": "+err.Error())
		return
	}
	d := x.s.o.Rules.Admit(wr, caller, x.r.Header.Get(HeaderFence), grant, grantErr)
	if !d.Allowed {
		x.deny(d)
		x.report(d, fl)
		return
	}
	x.log = x.log.WithValues("fencedLease", route.String(), "fence", d.Fence)
	path := op.Path()
	for range x.s.o.Attempts {
		st, err := x.s.o.Upstream.Head(ctx, path)
		if err != nil {
			x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError, "cannot read "+wr.String()+" from the store: "+err.Error())
			return
		}
		if d := x.s.o.Rules.CheckStored(wr, d.Fence, st.Fence); !d.Allowed {
			x.deny(d)
			x.report(d, fl)
			return
		}
		if msg := callerPreconditions(x.r.Header, st); msg != "" {
			x.fail(http.StatusPreconditionFailed, CodePrecondition, ReasonPrecondition, wr.String()+": "+msg)
			return
		}
		resp, retry, err := x.send(ctx, path, st, d.Fence)
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				x.fail(he.status, he.code, he.reason, he.msg)
				return
			}
			x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError,
				"the store did not answer the write to "+wr.String()+" (its outcome is unknown: read the object back): "+err.Error())
			return
		}
		if resp == nil {
			// A DELETE of an absent object: done.
			x.ended = &answer{resultAllowed, ReasonHolder}
			x.w.WriteHeader(http.StatusNoContent)
			return
		}
		if resp.StatusCode == http.StatusPreconditionFailed || resp.StatusCode == http.StatusConflict {
			_ = resp.Body.Close()
			if m := x.s.o.Metrics; m != nil {
				m.conflicts.Inc()
			}
			if retry {
				continue
			}
			x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonContention,
				"another writer changed "+wr.String()+" while this write was sent; send it again")
			return
		}
		if resp.StatusCode < 300 {
			x.ended = &answer{resultAllowed, ReasonHolder}
		} else {
			x.ended = &answer{resultError, ReasonUpstreamAnswer}
		}
		if x.op.Kind == CopyObject && resp.StatusCode < 300 {
			_ = resp.Body.Close()
			copyResult(x.w, resp)
			return
		}
		relay(x.w, resp)
		return
	}
	x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonContention,
		fmt.Sprintf("other writers kept changing %s (%d attempts); send it again", wr, x.s.o.Attempts))
}

// httpError is a refusal found while preparing the upstream request.
type httpError struct {
	status int
	code   string
	reason Reason
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// callerPreconditions evaluates the caller's own If-Match and If-None-Match
// against the object the gateway read; the gateway's conditional write then
// holds them atomically. It returns why they fail, or "".
func callerPreconditions(h http.Header, st objectState) string {
	if v := h.Get("If-None-Match"); v != "" {
		if v == "*" && st.Exists {
			return "If-None-Match: * but the object exists"
		}
		if v != "*" && st.Exists && sameETag(v, st.ETag) {
			return "If-None-Match " + v + " matches the object"
		}
	}
	if v := h.Get("If-Match"); v != "" && (!st.Exists || (v != "*" && !sameETag(v, st.ETag))) {
		return "If-Match " + v + " does not match the object"
	}
	return ""
}

func sameETag(a, b string) bool { return strings.Trim(a, `"`) == strings.Trim(b, `"`) }

// condition makes a write conditional on the object the gateway read.
func condition(h http.Header, st objectState) {
	if st.Exists {
		h.Set("If-Match", st.ETag)
	} else {
		h.Set("If-None-Match", "*")
	}
}

// send makes the conditional write. retry says whether a lost precondition
// may be retried here (the request body was not consumed). A nil response
// with no error is a DELETE of an absent object, which needs no write.
func (x *exchange) send(ctx context.Context, path string, st objectState, f int64) (*http.Response, bool, error) {
	h := http.Header{}
	switch x.op.Kind {
	case DeleteObject:
		if !st.Exists {
			return nil, false, nil
		}
		condition(h, st)
		resp, err := x.s.o.Upstream.Do(ctx, http.MethodDelete, path, "", h, nil, 0)
		return resp, true, err
	case CopyObject:
		return x.copy(ctx, path, st, f)
	}
	body, length, err := requestBody(x.r)
	if err != nil {
		return nil, false, err
	}
	copyHeaders(h, x.r.Header, contentHeaders)
	copyHeaders(h, x.r.Header, writeHeaders)
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
	h.Set(HeaderMetaFence, record.FormatFence(f))
	condition(h, st)
	cr := &countingReader{r: body}
	var rd io.Reader = cr
	if length == 0 {
		rd = http.NoBody
	}
	resp, err := x.s.o.Upstream.Do(ctx, http.MethodPut, path, "", h, rd, length)
	return resp, cr.n == 0, err
}

// requestBody is a PUT's content and length: an aws-chunked body is
// decoded (the gateway re-signs the request, so chunk signatures cannot be
// forwarded).
func requestBody(r *http.Request) (io.Reader, int64, error) {
	if isAWSChunked(r.Header.Get("X-Amz-Content-Sha256"), r.Header.Get("Content-Encoding")) {
		n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
		if err != nil || n < 0 {
			return nil, 0, &httpError{http.StatusLengthRequired, "MissingContentLength", ReasonBadRequest,
				"an aws-chunked body needs a valid x-amz-decoded-content-length"}
		}
		return io.LimitReader(newDechunker(r.Body), n), n, nil
	}
	if r.ContentLength < 0 {
		return nil, 0, &httpError{http.StatusLengthRequired, "MissingContentLength", ReasonBadRequest, "a PUT needs a Content-Length"}
	}
	return r.Body, r.ContentLength, nil
}

// contentEncoding drops aws-chunked from a Content-Encoding.
func contentEncoding(v string) string {
	var out []string
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" && p != "aws-chunked" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// copy writes the source object's content to the destination with a
// conditional PUT: the store's own copy cannot be made conditional on the
// destination's ETag everywhere, so the gateway streams it.
func (x *exchange) copy(ctx context.Context, path string, st objectState, f int64) (*http.Response, bool, error) {
	srcPath := EscapePath(x.op.SourceBucket, x.op.SourceKey)
	sh := http.Header{}
	for _, n := range []string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"} {
		if v := x.r.Header.Get("X-Amz-Copy-Source-" + n); v != "" {
			sh.Set(n, v)
		}
	}
	src, err := x.s.o.Upstream.Do(ctx, http.MethodGet, srcPath, "", sh, nil, 0)
	if err != nil {
		return nil, false, err
	}
	if src.StatusCode != http.StatusOK {
		_ = src.Body.Close()
		code, reason := "NoSuchKey", ReasonMissingResource
		if src.StatusCode == http.StatusPreconditionFailed || src.StatusCode == http.StatusNotModified {
			code, reason = CodePrecondition, ReasonPrecondition
		}
		return nil, false, &httpError{src.StatusCode, code, reason,
			fmt.Sprintf("copy source %s/%s: the store answered %s", x.op.SourceBucket, x.op.SourceKey, src.Status)}
	}
	defer src.Body.Close()
	h := http.Header{}
	if strings.EqualFold(x.r.Header.Get("X-Amz-Metadata-Directive"), "REPLACE") {
		copyHeaders(h, x.r.Header, contentHeaders)
		userMetadata(h, x.r.Header)
	} else {
		copyHeaders(h, src.Header, contentHeaders)
		copyHeaders(h, src.Header, []string{"Content-Encoding"})
		userMetadata(h, src.Header)
	}
	copyHeaders(h, x.r.Header, writeHeaders)
	h.Set(HeaderMetaFence, record.FormatFence(f))
	condition(h, st)
	var body io.Reader = src.Body
	if src.ContentLength == 0 {
		body = http.NoBody
	}
	resp, err := x.s.o.Upstream.Do(ctx, http.MethodPut, path, "", h, body, src.ContentLength)
	return resp, true, err
}

// copyObjectResult is the body of a CopyObject answer.
type copyObjectResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	ETag         string   `xml:"ETag"`
	LastModified string   `xml:"LastModified"`
}

// copyResult answers a copy made by a PUT.
func copyResult(w http.ResponseWriter, put *http.Response) {
	if v := put.Header.Get("X-Amz-Version-Id"); v != "" {
		w.Header().Set("X-Amz-Version-Id", v)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	body, _ := xml.Marshal(copyObjectResult{ETag: put.Header.Get("ETag"), LastModified: time.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}
