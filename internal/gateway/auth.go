package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// errUnauthenticated is a token the API server did not accept.
var errUnauthenticated = errors.New("token not authenticated")

// TokenReviewer authenticates a token with the API server's TokenReview
// API and remembers the answers briefly: a holder writing often costs one
// review per TTL, not one per write.
//
// Tokens sent at random must not cost the holders anything: accepted and
// rejected answers are kept apart (MaxAccepted and MaxRejected each), so
// rejected tokens never evict an accepted one; a token not remembered is
// reviewed only within its source's budget (UnknownPerSecond, with a burst
// of UnknownBurst, per client address), and a review ends after Timeout.
type TokenReviewer struct {
	Client kubernetes.Interface
	// Audiences, when set, are the audiences the token must be issued for.
	Audiences []string
	// TTL is how long an answer is reused.
	TTL time.Duration
	// MaxAccepted and MaxRejected bound the answers kept (0: 4096 and 1024).
	MaxAccepted, MaxRejected int
	// UnknownPerSecond and UnknownBurst bound the reviews of tokens not
	// remembered, per source (0: 20 and 40); Timeout bounds one review
	// (0: 5 s).
	UnknownPerSecond float64
	UnknownBurst     int
	Timeout          time.Duration
	// Metrics, when set, counts the reviews sent.
	Metrics *Metrics

	mu       sync.Mutex
	accepted answers
	rejected answers
	sources  map[string]*sourceBudget
}

type reviewEntry struct {
	caller  Caller
	err     error
	expires time.Time
}

// answers is a bounded set of remembered answers.
type answers map[[32]byte]reviewEntry

// sourceBudget is a source's budget of reviews of unknown tokens.
type sourceBudget struct {
	limiter *rate.Limiter
	seen    time.Time
}

// maxSources bounds the sources whose budgets are kept; beyond it, the
// idle ones are forgotten first, then all of them share one budget.
const maxSources = 4096

// errTooManyTokens is a source over its budget of unknown tokens.
var errTooManyTokens = errors.New("too many unknown tokens")

// Review returns the caller that token authenticates, or an error wrapping
// errUnauthenticated when the API server rejects the token, or
// errTooManyTokens when source sent more unknown tokens than its budget
// (any other error is the API server's). source is the client's address.
func (a *TokenReviewer) Review(ctx context.Context, token, source string) (Caller, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	a.mu.Lock()
	if e, ok := a.accepted[key]; ok && now.Before(e.expires) {
		a.mu.Unlock()
		return e.caller, e.err
	}
	if e, ok := a.rejected[key]; ok && now.Before(e.expires) {
		a.mu.Unlock()
		return e.caller, e.err
	}
	allowed := a.budget(source, now).Allow()
	a.mu.Unlock()
	if !allowed {
		return Caller{}, fmt.Errorf("%w from %s: at most %g a second are reviewed; send the pod's current token", errTooManyTokens, source, a.perSecond())
	}

	ctx, cancel := context.WithTimeout(ctx, orDefault(a.Timeout, 5*time.Second))
	defer cancel()
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		a.Metrics.Reviewed("error")
		return Caller{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		a.Metrics.Reviewed("rejected")
		err = fmt.Errorf("%w: %s", errUnauthenticated, tr.Status.Error)
		a.remember(&a.rejected, orDefaultInt(a.MaxRejected, 1024), key, reviewEntry{err: err, expires: now.Add(a.TTL)})
		return Caller{}, err
	}
	a.Metrics.Reviewed("accepted")
	extra := map[string][]string{}
	for k, v := range tr.Status.User.Extra {
		extra[k] = v
	}
	c := callerFrom(tr.Status.User.Username, extra)
	a.remember(&a.accepted, orDefaultInt(a.MaxAccepted, 4096), key, reviewEntry{caller: c, expires: now.Add(a.TTL)})
	return c, nil
}

func (a *TokenReviewer) perSecond() float64 {
	if a.UnknownPerSecond > 0 {
		return a.UnknownPerSecond
	}
	return 20
}

// budget is source's budget (a.mu held).
func (a *TokenReviewer) budget(source string, now time.Time) *rate.Limiter {
	if a.sources == nil {
		a.sources = map[string]*sourceBudget{}
	}
	b := a.sources[source]
	if b == nil {
		if len(a.sources) >= maxSources {
			for k, old := range a.sources {
				if now.Sub(old.seen) > time.Minute {
					delete(a.sources, k)
				}
			}
		}
		if len(a.sources) >= maxSources {
			source = "(every other source)"
			b = a.sources[source]
		}
		if b == nil {
			b = &sourceBudget{limiter: rate.NewLimiter(rate.Limit(a.perSecond()), orDefaultInt(a.UnknownBurst, 40))}
			a.sources[source] = b
		}
	}
	b.seen = now
	return b.limiter
}

// remember keeps an answer in set, at most max of them: the expired ones
// go first, then any.
func (a *TokenReviewer) remember(set *answers, max int, key [32]byte, e reviewEntry) {
	if a.TTL <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if *set == nil {
		*set = answers{}
	}
	if len(*set) >= max {
		now := time.Now()
		for k, old := range *set {
			if !now.Before(old.expires) {
				delete(*set, k)
			}
		}
		for k := range *set {
			if len(*set) < max {
				break
			}
			delete(*set, k)
		}
	}
	(*set)[key] = e
}

func orDefaultInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
