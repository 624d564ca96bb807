package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// errUnauthenticated is a token the API server did not accept.
var errUnauthenticated = errors.New("token not authenticated")

// TokenReviewer authenticates a token with the API server's TokenReview
// API and remembers the answers briefly: a holder writing often costs one
// review per TTL, not one per write. At most Max answers are kept, so
// tokens sent at random cannot grow the memory.
type TokenReviewer struct {
	Client kubernetes.Interface
	// Audiences, when set, are the audiences the token must be issued for.
	Audiences []string
	// TTL is how long an answer is reused; Max how many are kept.
	TTL time.Duration
	Max int

	mu    sync.Mutex
	cache map[[32]byte]reviewEntry
}

type reviewEntry struct {
	caller  Caller
	err     error
	expires time.Time
}

// Review returns the caller that token authenticates, or an error wrapping
// errUnauthenticated when the API server rejects the token (any other
// error is the API server's).
func (a *TokenReviewer) Review(ctx context.Context, token string) (Caller, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	a.mu.Lock()
	if e, ok := a.cache[key]; ok && now.Before(e.expires) {
		a.mu.Unlock()
		return e.caller, e.err
	}
	a.mu.Unlock()

	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Caller{}, fmt.Errorf("TokenReview: %w", err)
	}
	var c Caller
	if !tr.Status.Authenticated {
		err = fmt.Errorf("%w: %s", errUnauthenticated, tr.Status.Error)
	} else {
		extra := map[string][]string{}
		for k, v := range tr.Status.User.Extra {
			extra[k] = v
		}
		c = callerFrom(tr.Status.User.Username, extra)
	}
	a.remember(key, reviewEntry{caller: c, err: err, expires: now.Add(a.TTL)})
	return c, err
}

func (a *TokenReviewer) remember(key [32]byte, e reviewEntry) {
	if a.TTL <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache == nil {
		a.cache = map[[32]byte]reviewEntry{}
	}
	if len(a.cache) >= a.Max {
		now := time.Now()
		for k, old := range a.cache {
			if !now.Before(old.expires) {
				delete(a.cache, k)
			}
		}
		// Still full: forget an arbitrary answer.
		for k := range a.cache {
			if len(a.cache) < a.Max {
				break
			}
			delete(a.cache, k)
		}
	}
	if a.Max > 0 {
		a.cache[key] = e
	}
}
