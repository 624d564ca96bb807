package setup

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// authBackoff is how the TokenReviews and SubjectAccessReviews of the
// metrics endpoint are retried when the API server cannot be reached (the
// API server's own default for its authentication webhooks).
var authBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// metricsAuth authenticates every scrape with a TokenReview and authorizes
// it with a SubjectAccessReview (get on the path), as controller-runtime's
// filters.WithAuthenticationAndAuthorization does, with one difference: a
// request whose token the API server does not accept (malformed, expired,
// signed by no one it trusts) is answered 401 Unauthorized, as the API
// server itself answers it, and logged at debug level only. The endpoint is
// reachable from the pod network: what anyone can send must get neither a
// server error (500) nor an error in the operator's log for every request.
// An authorization that fails (the API server cannot answer) is a 500 and
// is logged.
func metricsAuth(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	authz, err := authorizationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authorization client: %w", err)
	}
	authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &authBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authenticator: %w", err)
	}
	authorizerOf, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &authBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorizer: %w", err)
	}
	return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			res, ok, err := authenticator.AuthenticateRequest(req)
			if err != nil || !ok {
				log.V(4).Info("Refused a metrics scrape that the API server did not authenticate", "remote", req.RemoteAddr, "reason", fmt.Sprint(err))
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			user := res.User.GetName()
			decision, reason, err := authorizerOf.Authorize(req.Context(), authorizer.AttributesRecord{
				User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path,
			})
			switch {
			case err != nil:
				log.Error(err, "Cannot authorize a metrics scrape", "user", user)
				http.Error(w, "Authorization for user "+user+" failed", http.StatusInternalServerError)
			case decision != authorizer.DecisionAllow:
				log.V(4).Info("Refused a metrics scrape", "user", user, "reason", reason)
				http.Error(w, "Authorization denied for user "+user, http.StatusForbidden)
			default:
				handler.ServeHTTP(w, req)
			}
		}), nil
	}, nil
}
