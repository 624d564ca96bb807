package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Reviewer authenticates a token.
type Reviewer interface {
	// Review authenticates token, sent from source (the client's
	// address).
	Review(ctx context.Context, token, source string) (Caller, error)
}

// Grants reads the committed grant of a route's FencedLease, or of its
// shard of a FencedShardSet, from the API server (GrantReader). The object
// is the FencedLease or FencedShardSet, for Events; nil when it does not
// exist.
type Grants interface {
	Read(ctx context.Context, route Route) (Grant, client.Object, error, error)
}

// Rules are the fence decisions. DefaultRules are Admit and CheckStored;
// tests replace them with broken ones to show that their checkers catch
// what a broken gateway lets through. Never change them in production.
type Rules struct {
	Admit       func(w Write, c Caller, fenceHeader string, g Grant, grantErr error) Decision
	CheckStored func(w Write, f int64, stored string) Decision
}

// DefaultRules are the gateway's fence decisions.
var DefaultRules = Rules{Admit: Admit, CheckStored: CheckStored}

// Defaults of Options.
const (
	DefaultMaxInFlight     = 512
	DefaultAttempts        = 5
	DefaultKeyLockTimeout  = 30 * time.Second
	DefaultGrantMaxAge     = 100 * time.Millisecond
	DefaultBodyIdleTimeout = 30 * time.Second
	DefaultBodyTimeout     = 15 * time.Minute
)

// Options configure a Server.
type Options struct {
	Config   *Config
	Upstream *Upstream
	Reviewer Reviewer
	Grants   Grants
	// Recorder records StaleWriteRejected Events on FencedLeases; none
	// when nil.
	Recorder events.EventRecorder
	Metrics  *Metrics
	Log      logr.Logger
	// MaxInFlight bounds the requests served at once; more are answered
	// 503 SlowDown. DefaultMaxInFlight when 0.
	MaxInFlight int
	// Attempts bounds the rounds of a conditional write that loses its
	// precondition to another writer; DefaultAttempts when 0.
	Attempts int
	// KeyLockTimeout bounds the wait for another write to the same key in
	// this process (503 SlowDown after it); DefaultKeyLockTimeout when 0.
	KeyLockTimeout time.Duration
	// GrantMaxAge is the oldest a grant read may be when a write's last
	// byte goes to the store; an older one is read again first.
	// DefaultGrantMaxAge when 0.
	GrantMaxAge time.Duration
	// BodyIdleTimeout is the longest a request body may send nothing,
	// BodyTimeout the longest it may take from the request's arrival;
	// the defaults when 0, none when negative.
	BodyIdleTimeout, BodyTimeout time.Duration
	// Rules are DefaultRules when zero.
	Rules Rules
}

// Server is the gateway's HTTP handler.
type Server struct {
	o          Options
	locks      keyLocks
	sem        chan struct{}
	tombstones *tombstoneETags
}

// New returns a Server.
func New(o Options) *Server {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	o.KeyLockTimeout = orDefault(o.KeyLockTimeout, DefaultKeyLockTimeout)
	o.GrantMaxAge = orDefault(o.GrantMaxAge, DefaultGrantMaxAge)
	o.BodyIdleTimeout = orDefault(o.BodyIdleTimeout, DefaultBodyIdleTimeout)
	o.BodyTimeout = orDefault(o.BodyTimeout, DefaultBodyTimeout)
	if o.Rules.Admit == nil || o.Rules.CheckStored == nil {
		o.Rules = DefaultRules
	}
	return &Server{o: o, sem: make(chan struct{}, o.MaxInFlight), tombstones: newTombstoneETags(4096)}
}

// orDefault is d when v is 0, and no limit (0) when v is negative.
func orDefault(v, d time.Duration) time.Duration {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}

// KeysInFlight is how many keys have a write in flight (for tests of the
// bounded memory).
func (s *Server) KeysInFlight() int { return s.locks.size() }

// answer is how a request ended, for metrics and logs.
type answer struct {
	result string
	reason Reason
}

// exchange is one request being served.
type exchange struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	id    string
	op    Op
	log   logr.Logger
	ended *answer
	start time.Time
	// body is the request body as a write reads it (clientBody), ahead
	// its part read while the write waited for its key.
	body  *countingReader
	ahead *readAhead
	// interrupted stops the reading of the body (interruptBody).
	interrupted atomic.Bool
}

func (x *exchange) fail(status int, code string, reason Reason, msg string) {
	result := resultDenied
	if status >= 500 {
		result = resultError
	}
	x.ended = &answer{result, reason}
	writeError(x.w, x.r, status, code, msg, x.id)
	x.log.V(1).Info("Request refused", "status", status, "code", code, "reason", reason, "message", msg)
}

func (x *exchange) deny(d Decision) { x.fail(d.Status, d.Code, d.Reason, d.Message) }

// ServeHTTP serves one S3 request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	x := &exchange{s: s, w: w, r: r, id: requestID(), op: Classify(r), start: start}
	x.log = s.o.Log.WithValues("requestID", x.id, "method", r.Method, "bucket", x.op.Bucket, "key", x.op.Key)
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonOverloaded, "the gateway serves too many requests at once; retry")
		s.o.Metrics.observe(x.op.Kind, x.ended.result, x.ended.reason, time.Since(start))
		return
	}
	if m := s.o.Metrics; m != nil {
		m.inFlight.Inc()
		defer m.inFlight.Dec()
	}
	x.serve(r.Context())
	if x.ended == nil {
		x.ended = &answer{resultError, ReasonUpstreamError}
	}
	s.o.Metrics.observe(x.op.Kind, x.ended.result, x.ended.reason, time.Since(start))
}

func (x *exchange) serve(ctx context.Context) {
	op := x.op
	switch op.Kind {
	case Unsupported:
		x.fail(http.StatusNotImplemented, CodeNotImplemented, ReasonUnsupported, op.Why)
		return
	case Invalid:
		x.fail(http.StatusBadRequest, op.Code, ReasonBadPath, op.Why)
		return
	}
	token := x.r.Header.Get(HeaderToken)
	if token == "" {
		x.fail(http.StatusForbidden, CodeMissingToken, ReasonMissingToken,
			"the request carries no "+HeaderToken+" header: send the pod's service-account token")
		return
	}
	caller, err := x.s.o.Reviewer.Review(ctx, token, clientAddress(x.r))
	if err != nil {
		if errors.Is(err, errTooManyTokens) {
			x.fail(http.StatusServiceUnavailable, CodeSlowDown, ReasonTooManyTokens, "cannot authenticate the token: "+err.Error())
			return
		}
		if errors.Is(err, errUnauthenticated) {
			x.fail(http.StatusForbidden, CodeInvalidToken, ReasonInvalidToken, "the "+HeaderToken+" token is not valid: "+err.Error())
			return
		}
		x.fail(http.StatusServiceUnavailable, CodeUnavailable, ReasonAuthError, "cannot authenticate the token: "+err.Error())
		return
	}
	x.log = x.log.WithValues("user", caller.Username, "podName", caller.PodName)
	switch op.Kind {
	case ListBucket:
		if !x.s.o.Config.ListAllowed(op.Bucket, x.r.URL.Query().Get("prefix"), caller.Namespace) {
			x.fail(http.StatusForbidden, CodeAccessDenied, ReasonNoRoute,
				"listing bucket "+op.Bucket+" under prefix \""+x.r.URL.Query().Get("prefix")+"\" denied: no route of namespace "+caller.Namespace+" covers it")
			return
		}
		x.read(ctx)
	case ReadObject:
		route, ok := x.s.o.Config.Route(op.Bucket, op.Key)
		switch {
		case !ok:
			x.fail(http.StatusForbidden, CodeAccessDenied, ReasonNoRoute, "no route for "+op.Bucket+"/"+op.Key)
		case route.Namespace != caller.Namespace:
			x.fail(http.StatusForbidden, CodeAccessDenied, ReasonWrongNamespace,
				"read of "+op.Bucket+"/"+op.Key+" denied: it is routed to FencedLease "+route.String()+", and user "+caller.Username+" is not a service account of namespace "+route.Namespace)
		default:
			x.read(ctx)
		}
	default:
		x.write(ctx, caller)
	}
}

// report logs a denied write and records a StaleWriteRejected Event on the
// FencedLease (or FencedShardSet) for a pod that wrote as a holder it is not. The Events API
// folds repeats into one series per FencedLease and action.
func (x *exchange) report(d Decision, fl client.Object) {
	if d.StaleWrite && fl != nil && x.s.o.Recorder != nil {
		x.s.o.Recorder.Eventf(fl, nil, "Warning", fencingv1alpha1.EventStaleWriteRejected, "Reject"+actionNames[x.op.Kind], "%s", d.Message)
	}
}

var actionNames = map[Kind]string{PutObject: "PutObject", CopyObject: "CopyObject", DeleteObject: "DeleteObject"}

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// clientAddress is the address the request came from (the connection's,
// never a header a client can set).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
