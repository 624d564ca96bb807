package endpoint

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The token Secret lives in the operator's own namespace. Creating it cannot
// be narrowed to one name by RBAC; reading it is.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;update,resourceNames=fencedlease-webhook-token

// TokenKey is the key of the token in the Secret's data.
const TokenKey = "token"

// tokenBytes is the entropy of a token: 256 bits.
const tokenBytes = 32

// tokenEncoding writes a token as one lowercase label of 52 characters
// (a–z, 2–7): the API server accepts a webhook Service's path only when each
// segment is a lowercase RFC 1123 subdomain, whose labels have at most 63.
var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newToken() (string, error) {
	buf := make([]byte, tokenBytes)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate a webhook path token: %w", err)
	}
	return strings.ToLower(tokenEncoding.EncodeToString(buf)), nil
}

// EnsureToken returns the path token kept in the Secret, creating the Secret
// with a new random token when there is none. r must read from the API
// server (no cache: a cache of Secrets would list them all); w creates. Two
// replicas that start together agree: the one whose create fails reads the
// other's token.
func EnsureToken(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (string, error) {
	token, err := readToken(ctx, r, w, key)
	if !apierrors.IsNotFound(err) {
		return token, err
	}
	if token, err = newToken(); err != nil {
		return "", err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "fencedlease", "app.kubernetes.io/component": "webhook"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{TokenKey: []byte(token)},
	}
	switch err := w.Create(ctx, s); {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("Created the webhook path token", "secret", klog.KObj(s))
		return token, nil
	case apierrors.IsAlreadyExists(err):
		return readToken(ctx, r, w, key)
	default:
		return "", fmt.Errorf("create Secret %s for the webhook path token: %w", klog.KObj(s), err)
	}
}

func readToken(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (string, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", err
		}
		return "", fmt.Errorf("get Secret %s with the webhook path token: %w", key, err)
	}
	token := string(s.Data[TokenKey])
	if legacyToken(token) {
		return replaceToken(ctx, r, w, s)
	}
	if err := validToken(token); err != nil {
		return "", fmt.Errorf("webhook path token in Secret %s: key %q %w; delete the Secret to have a new token generated", key, TokenKey, err)
	}
	return token, nil
}

// replaceToken writes a new token over one of the earlier format (unpadded
// base64url, which a webhook Service's path cannot carry), on the version
// read: of two replicas that replace it at once, the one whose update
// conflicts reads the other's token.
func replaceToken(ctx context.Context, r client.Reader, w client.Writer, s *corev1.Secret) (string, error) {
	token, err := newToken()
	if err != nil {
		return "", err
	}
	s.Data[TokenKey] = []byte(token)
	switch err := w.Update(ctx, s); {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("Replaced the webhook path token of the earlier format", "secret", klog.KObj(s))
		return token, nil
	case apierrors.IsConflict(err):
		return readToken(ctx, r, w, client.ObjectKeyFromObject(s))
	default:
		return "", fmt.Errorf("replace the webhook path token of the earlier format in Secret %s: %w", klog.KObj(s), err)
	}
}

// legacyToken is a token of the earlier format: 32 bytes in unpadded
// base64url.
func legacyToken(token string) bool {
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	return err == nil && len(b) == tokenBytes && len(token) == base64.RawURLEncoding.EncodedLen(tokenBytes)
}

// validToken checks that a token is what EnsureToken generates: 32 bytes in
// unpadded lowercase base32, so that it is safe in a URL path and in a
// webhook Service's path, and cannot be guessed.
func validToken(token string) error {
	if token == "" {
		return fmt.Errorf("is missing or empty")
	}
	b, err := tokenEncoding.DecodeString(strings.ToUpper(token))
	if err != nil || len(b) != tokenBytes || token != strings.ToLower(tokenEncoding.EncodeToString(b)) {
		return fmt.Errorf("must hold %d random bytes in unpadded lowercase base32 (%d characters)", tokenBytes, tokenEncoding.EncodedLen(tokenBytes))
	}
	return nil
}
