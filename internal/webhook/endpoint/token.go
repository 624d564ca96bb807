package endpoint

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

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
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get,resourceNames=fencedlease-webhook-token

// TokenKey is the key of the token in the Secret's data.
const TokenKey = "token"

// tokenBytes is the entropy of a token: 256 bits.
const tokenBytes = 32

// EnsureToken returns the path token kept in the Secret, creating the Secret
// with a new random token when there is none. r must read from the API
// server (no cache: a cache of Secrets would list them all); w creates. Two
// replicas that start together agree: the one whose create fails reads the
// other's token.
func EnsureToken(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (string, error) {
	token, err := readToken(ctx, r, key)
	if !apierrors.IsNotFound(err) {
		return token, err
	}
	buf := make([]byte, tokenBytes)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate a webhook path token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(buf)
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
		return readToken(ctx, r, key)
	default:
		return "", fmt.Errorf("create Secret %s for the webhook path token: %w", klog.KObj(s), err)
	}
}

func readToken(ctx context.Context, r client.Reader, key types.NamespacedName) (string, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", err
		}
		return "", fmt.Errorf("get Secret %s with the webhook path token: %w", key, err)
	}
	token := string(s.Data[TokenKey])
	if err := validToken(token); err != nil {
		return "", fmt.Errorf("webhook path token in Secret %s: key %q %w; delete the Secret to have a new token generated", key, TokenKey, err)
	}
	return token, nil
}

// validToken checks that a token is what EnsureToken generates: 32 bytes in
// unpadded base64url, so that it is safe in a URL path and cannot be guessed.
func validToken(token string) error {
	if token == "" {
		return fmt.Errorf("is missing or empty")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) != tokenBytes {
		return fmt.Errorf("must hold %d random bytes in unpadded base64url (%d characters)", tokenBytes, base64.RawURLEncoding.EncodedLen(tokenBytes))
	}
	return nil
}
