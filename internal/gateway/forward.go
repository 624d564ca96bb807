package gateway

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"strings"
	"time"
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

// userMetadata copies x-amz-meta-* headers, except the gateway's own
// (x-amz-meta-fencedlease-*): a caller cannot forge a fence or a tombstone.
func userMetadata(dst, src http.Header) {
	for k, v := range src {
		if strings.HasPrefix(k, "X-Amz-Meta-") && !strings.HasPrefix(strings.ToLower(k), "x-amz-meta-fencedlease-") {
			dst[k] = v
		}
	}
}

// read forwards a GET or HEAD, signed by the gateway. A tombstone is
// answered as absent, and a listing leaves tombstones out.
func (x *exchange) read(ctx context.Context) {
	h := http.Header{}
	copyHeaders(h, x.r.Header, readHeaders)
	resp, err := x.s.o.Upstream.Do(ctx, x.r.Method, x.op.Path(), x.r.URL.RawQuery, h, nil, 0)
	if err != nil {
		x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError, "the store did not answer: "+err.Error())
		return
	}
	if x.op.Kind == ReadObject && isTombstone(resp.Header) {
		_ = resp.Body.Close()
		x.fail(http.StatusNotFound, CodeNoSuchKey, ReasonMissingResource, "the object "+x.op.Bucket+"/"+x.op.Key+" does not exist (it was deleted)")
		return
	}
	x.ended = &answer{resultAllowed, ReasonRead}
	if x.op.Kind == ListBucket && x.r.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		x.relayListing(ctx, resp)
		return
	}
	relay(x.w, resp)
}

// relayListing sends a listing without its tombstones.
func (x *exchange) relayListing(ctx context.Context, resp *http.Response) {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
	if err == nil && len(body) > maxListing {
		x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError, "the store's listing is larger than the gateway reads; ask for fewer keys (max-keys)")
		return
	}
	if err == nil {
		urlKeys := x.r.URL.Query().Get("encoding-type") == "url"
		body, err = filterListing(body, urlKeys, func(key, versionID, etag string) (bool, error) {
			return x.classifyETag(ctx, key, versionID, etag)
		})
	}
	if err != nil {
		x.fail(http.StatusBadGateway, CodeUnavailable, ReasonUpstreamError, "the store's listing could not be read: "+err.Error())
		return
	}
	for k, v := range resp.Header {
		if k == "Connection" || k == "Keep-Alive" || k == "Transfer-Encoding" || k == "Content-Length" {
			continue
		}
		x.w.Header()[k] = v
	}
	x.w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(x.w, bytes.NewReader(body))
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

// httpError is a refusal found while preparing the upstream request.
type httpError struct {
	status int
	code   string
	reason Reason
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// callerPreconditions evaluates the caller's own If-Match and If-None-Match
// against the object the gateway read (a tombstone is no object); the
// gateway's conditional write then holds them atomically. It returns why
// they fail, or "".
func callerPreconditions(h http.Header, st objectState) string {
	present := st.Present()
	if v := h.Get("If-None-Match"); v != "" {
		if v == "*" && present {
			return "If-None-Match: * but the object exists"
		}
		if v != "*" && present && sameETag(v, st.ETag) {
			return "If-None-Match " + v + " matches the object"
		}
	}
	if v := h.Get("If-Match"); v != "" && (!present || (v != "*" && !sameETag(v, st.ETag))) {
		return "If-Match " + v + " does not match the object"
	}
	return ""
}

func sameETag(a, b string) bool { return strings.Trim(a, `"`) == strings.Trim(b, `"`) }

// condition makes a write conditional on the object the gateway read, a
// tombstone included.
func condition(h http.Header, st objectState) {
	if st.Exists {
		h.Set("If-Match", st.ETag)
	} else {
		h.Set("If-None-Match", "*")
	}
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
