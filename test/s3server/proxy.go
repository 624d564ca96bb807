package s3server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// DropProxy forwards HTTP requests to a server and can lose replies: a
// request that a drop rule matches is forwarded and answered by the server,
// then the proxy closes the client's connection without a word, as a
// network that loses the reply would. The client cannot tell whether the
// request was applied.
type DropProxy struct {
	*httptest.Server
	upstream string
	mu       sync.Mutex
	rules    []dropRule
	dropped  []string
	holds    []*hold
}

// hold keeps one matching request back until it is released.
type hold struct {
	match    func(*http.Request) bool
	used     bool
	held     chan struct{}
	released chan struct{}
}

type dropRule struct {
	match   func(*http.Request) bool
	left    int
	request bool
}

// NewDropProxy starts a proxy on loopback in front of upstream (a base URL).
func NewDropProxy(upstream string) *DropProxy {
	p := &DropProxy{upstream: upstream}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

// DropNext loses the replies to the next n requests that match.
func (p *DropProxy) DropNext(n int, match func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, dropRule{match: match, left: n})
}

// DropRequestNext loses the next n requests that match before they reach
// the server: they are not applied, and the client hears nothing.
func (p *DropProxy) DropRequestNext(n int, match func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, dropRule{match: match, left: n, request: true})
}

// Hold keeps the next request that matches from reaching the server until
// release is called: held is closed once such a request is waiting (its
// body read), as a slow network between a client and the store would.
func (p *DropProxy) Hold(match func(*http.Request) bool) (held <-chan struct{}, release func()) {
	h := &hold{match: match, held: make(chan struct{}), released: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	var once sync.Once
	return h.held, func() { once.Do(func() { close(h.released) }) }
}

func (p *DropProxy) holdFor(r *http.Request) *hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holds {
		if !h.used && h.match(r) {
			h.used = true
			return h
		}
	}
	return nil
}

// Dropped lists what was lost: "reply to METHOD path" or "request METHOD
// path".
func (p *DropProxy) Dropped() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dropped...)
}

// drop says whether to lose the reply, or the request itself.
func (p *DropProxy) drop(r *http.Request) (reply, request bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.rules {
		if p.rules[i].left > 0 && p.rules[i].match(r) {
			p.rules[i].left--
			what := "reply to "
			if p.rules[i].request {
				what = "request "
			}
			p.dropped = append(p.dropped, what+r.Method+" "+r.URL.Path)
			return !p.rules[i].request, p.rules[i].request
		}
	}
	return false, false
}

func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

func (p *DropProxy) serve(w http.ResponseWriter, r *http.Request) {
	if h := p.holdFor(r); h != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		close(h.held)
		<-h.released
	}
	drop, dropRequest := p.drop(r)
	if dropRequest {
		_, _ = io.Copy(io.Discard, r.Body)
		hangUp(w)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host // the client signed this Host
	out.ContentLength = r.ContentLength
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if drop {
		// The server has answered: lose the answer.
		_, _ = io.Copy(io.Discard, resp.Body)
		hangUp(w)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
