//go:build chaos

package chaos

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// denialReasons map the fencing webhook's denial messages (docs/fencing.md,
// "The rules") to its reasons, the label of its decision metric. The first
// match wins; the patterns are fragments that only one message contains.
var denialReasons = []struct{ fragment, reason string }{
	{": stale holder: FencedLease ", "stale_fence"},
	{": stale holder: shard ", "stale_fence"},
	{": the object was last written with fence ", "object_fence_regression"},
	{": unknown fence: FencedLease ", "unknown_fence"},
	{": unknown fence: shard ", "unknown_fence"},
	{" is not the holder of FencedLease ", "not_holder"},
	{" is not the holder of shard ", "not_holder"},
	{" has no shard ", "unknown_shard"},
	{" has no holder (fence ", "no_holder"},
	{" not found in namespace ", "lease_not_found"},
	{" is not a pod: ", "write_not_pod"},
	{": no fencedlease.io/fence annotation: ", "missing_fence"},
	{": annotation fencedlease.io/fence: ", "malformed_fence"},
	{" write cannot change annotation ", "subresource_metadata"},
	{" cannot be removed ", "label_changed"},
	{" cannot be changed to ", "label_changed"},
	{" must name a FencedLease in the same namespace", "invalid_label"},
	// The webhook could not read the grant's Lease (its request was
	// cancelled, the operator stopping): it refuses.
	{"denied the request: get Lease ", "lease_unread"},
}

// Classify tells from the error of a write whether it was accepted, certainly
// rejected (with the webhook's reason, or the kind of refusal), or of unknown
// outcome: only an error that proves the API server did not apply the write
// counts as a rejection; a timeout or a connection lost mid-request may hide
// an applied write.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return Accepted, ""
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "denied the request: "):
		for _, d := range denialReasons {
			if strings.Contains(msg, d.fragment) {
				return Rejected, d.reason
			}
		}
		return Rejected, "denied_other"
	case strings.Contains(msg, "failed calling webhook"):
		// failurePolicy Fail: the webhook could not be reached (the
		// operator is down), so admission refused the write.
		return Rejected, "webhook_unavailable"
	case apierrors.IsUnauthorized(err):
		// The pod's bound token dies with the pod.
		return Rejected, "unauthorized"
	case apierrors.IsForbidden(err):
		return Rejected, "forbidden"
	case apierrors.IsNotFound(err):
		return Rejected, "not_found"
	case apierrors.IsConflict(err):
		return Rejected, "conflict"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return Rejected, "invalid"
	case apierrors.IsTooManyRequests(err):
		return Rejected, "too_many_requests"
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return Unknown, "server_timeout"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Unknown, "client_timeout"
	}
	return Unknown, "error"
}
