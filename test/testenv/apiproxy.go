package testenv

import (
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// APIProxy is an HTTPS reverse proxy in front of the API server, through
// which one process (a manager, a Session) reaches it, so that a test can
// stall chosen requests of that process alone: a watch that stays open and
// delivers nothing, or every request, as a silent partition does (packets
// dropped, no connection refused, no error). It terminates TLS with a
// certificate of its own (Config and CAData give clients its CA) and passes
// the caller's bearer token on, so the API server authenticates the caller
// as itself.
//
// A stalled request is held open without an answer until its client gives
// up; a response in flight when its request becomes stalled is cut off from
// then on (its remaining bytes are dropped, and it never ends). Healing
// lets new requests through; the stalled ones stay stalled, as their peers
// would have timed them out.
type APIProxy struct {
	srv    *httptest.Server
	mu     sync.Mutex
	stall  func(*http.Request) bool
	held   int
	closed chan struct{}
}

// StartAPIProxy starts a proxy to the API server of cfg (whose transport,
// CA included, it uses upstream). Close stops it.
func StartAPIProxy(cfg *rest.Config) (*APIProxy, error) {
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	if upstream.Scheme == "" {
		upstream, err = url.Parse("https://" + cfg.Host)
		if err != nil {
			return nil, err
		}
	}
	tlsCfg, err := rest.TLSConfigFor(rest.AnonymousClientConfig(cfg))
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
	rp.FlushInterval = -1 // watches stream
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p := &APIProxy{closed: make(chan struct{})}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.stalled(r) {
			p.hold(r)
			return
		}
		sw := &stallingWriter{ResponseWriter: w, p: p, r: r}
		rp.ServeHTTP(sw, r)
		if !sw.dead && p.stalled(r) {
			p.hold(r) // its end, too, is lost
		}
	}))
	p.srv.StartTLS()
	return p, nil
}

// Host is the proxy's URL, for a client's Host.
func (p *APIProxy) Host() string { return p.srv.URL }

// CAData is the PEM of the certificate the proxy serves, for a client's CA.
func (p *APIProxy) CAData() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
}

// Config is a rest.Config that reaches the API server through the proxy
// with the bearer token.
func (p *APIProxy) Config(token string) *rest.Config {
	return &rest.Config{Host: p.Host(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData()}}
}

// Stall holds every request for which match is true, from now on, and
// those in flight whose response has not ended; nil stalls nothing more.
func (p *APIProxy) Stall(match func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall = match
}

// StallAll is a silent partition: every request is held.
func (p *APIProxy) StallAll() { p.Stall(func(*http.Request) bool { return true }) }

// Heal lets new requests through again.
func (p *APIProxy) Heal() { p.Stall(nil) }

// Close stops the proxy and lets the stalled requests end.
func (p *APIProxy) Close() {
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// IsWatch says whether a request is a watch of resource (plural, as in
// the URL path: "leases").
func IsWatch(resource string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		q := r.URL.Query()
		watch := q.Get("watch") == "true" || q.Get("watch") == "1" || strings.Contains(r.URL.Path, "/watch/")
		return watch && (strings.HasSuffix(r.URL.Path, "/"+resource) || strings.Contains(r.URL.Path, "/"+resource+"/"))
	}
}

func (p *APIProxy) stalled(r *http.Request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stall != nil && p.stall(r)
}

// Held is how many requests the proxy has stalled so far.
func (p *APIProxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// hold keeps a stalled request open until its client gives up or the
// proxy closes.
func (p *APIProxy) hold(r *http.Request) {
	p.mu.Lock()
	p.held++
	p.mu.Unlock()
	select {
	case <-r.Context().Done():
	case <-p.closed:
	}
}

// stallingWriter passes a response on until its request is stalled, then
// drops the rest and holds the request open.
type stallingWriter struct {
	http.ResponseWriter
	p    *APIProxy
	r    *http.Request
	dead bool
}

var errStalled = errors.New("stalled by the test's proxy")

func (w *stallingWriter) Write(b []byte) (int, error) {
	if w.dead {
		return 0, errStalled
	}
	if w.p.stalled(w.r) {
		w.dead = true
		w.p.hold(w.r)
		return 0, errStalled
	}
	return w.ResponseWriter.Write(b)
}

func (w *stallingWriter) Flush() {
	if !w.dead {
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}
