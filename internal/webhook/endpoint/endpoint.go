package endpoint

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// DefaultMaxRequestBytes caps the body of an admission request. An
// AdmissionReview carries at most two objects (old and new); etcd stores an
// object of at most 1.5 MiB by default, which is up to 2 MiB in JSON (the
// data of a Secret is base64 there). 6 MiB leaves room for the rest of the
// review and for managed fields. controller-runtime reads up to 7 MB; this
// cap applies first.
const DefaultMaxRequestBytes = 6 << 20

// Options configure an Endpoint.
type Options struct {
	// TokenSecret is the Secret, in the operator's namespace, that keeps the
	// path token.
	TokenSecret types.NamespacedName
	// ValidatingConfiguration and MutatingConfiguration name the webhook
	// configurations whose webhooks the endpoint serves; the path of each of
	// their webhooks that calls a registered path gets the token. Empty: none.
	ValidatingConfiguration, MutatingConfiguration string
	// MaxRequestBytes caps the body of a request; DefaultMaxRequestBytes if 0.
	MaxRequestBytes int64
	// ConfigureValidating, if set, makes the validating configuration what
	// the operator needs beyond the paths (the scale webhook's
	// matchCondition), reporting whether it changed anything; it is applied
	// with the token, and again whenever the configuration changes.
	ConfigureValidating func(*admissionregistrationv1.ValidatingWebhookConfiguration) bool
}

// Endpoint serves admission handlers under a secret path.
type Endpoint struct {
	opts  Options
	token string

	mu    sync.Mutex
	bases []string
}

// New reads the path token from the Secret of o, creating it if there is
// none: see EnsureToken.
func New(ctx context.Context, r client.Reader, w client.Writer, o Options) (*Endpoint, error) {
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	token, err := EnsureToken(ctx, r, w, o.TokenSecret)
	if err != nil {
		return nil, err
	}
	return &Endpoint{opts: o, token: token}, nil
}

// Register serves h at base/<token> on the server. The server registers,
// and labels its metrics with, base/ alone: the token never reaches a metric
// label or a log line.
func (e *Endpoint) Register(srv webhook.Server, base string, h http.Handler) {
	e.mu.Lock()
	e.bases = append(e.bases, base)
	e.mu.Unlock()
	srv.Register(base+"/", e.guard(base, h))
}

// registered returns the base paths served so far.
func (e *Endpoint) registered() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.bases)
}

// guard answers 404 to any path but base/<token>, 405 to anything but a
// POST, and caps the body of what it passes on. It reads nothing of a
// request it turns away.
func (e *Endpoint) guard(base string, next http.Handler) http.Handler {
	want := []byte(base + "/" + e.token)
	limit := e.opts.MaxRequestBytes
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.URL.Path), want) != 1 {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, fmt.Sprintf("method %s not allowed", r.Method), http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}
