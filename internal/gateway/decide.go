package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencedlease/fencedlease/internal/record"
)

// Caller is who sends a request, from its token's TokenReview.
type Caller struct {
	// Username is the authenticated user name.
	Username string
	// Namespace is the service account's namespace; empty when the caller
	// is not a service account.
	Namespace string
	// PodName and PodUID come from a token bound to a pod
	// (authentication.kubernetes.io/pod-name and pod-uid); empty otherwise.
	PodName string
	PodUID  types.UID
}

// callerFrom derives a Caller from a TokenReview's user.
func callerFrom(username string, extra map[string][]string) Caller {
	c := Caller{Username: username}
	if rest, ok := strings.CutPrefix(username, "system:serviceaccount:"); ok {
		if ns, _, ok := strings.Cut(rest, ":"); ok {
			c.Namespace = ns
		}
	}
	if v := extra[extraPodName]; len(v) == 1 {
		c.PodName = v[0]
	}
	if v := extra[extraPodUID]; len(v) == 1 {
		c.PodUID = types.UID(v[0])
	}
	return c
}

// The user extra keys that the API server fills from a pod-bound token.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// Reason is why a request was allowed or denied: the reason label of the
// metrics, one of a fixed set.
type Reason string

// Reasons. Allowed: ReasonHolder, ReasonRead. Denied: the rest.
const (
	ReasonHolder          Reason = "holder"
	ReasonRead            Reason = "read"
	ReasonNoRoute         Reason = "no_route"
	ReasonMissingToken    Reason = "missing_token"
	ReasonInvalidToken    Reason = "invalid_token"
	ReasonWrongNamespace  Reason = "wrong_namespace"
	ReasonMissingFence    Reason = "missing_fence"
	ReasonMalformedFence  Reason = "malformed_fence"
	ReasonNoHolder        Reason = "no_holder"
	ReasonStaleFence      Reason = "stale_fence"
	ReasonUnknownFence    Reason = "unknown_fence"
	ReasonNotHolder       Reason = "not_holder"
	ReasonObjectFence     Reason = "object_fence_regression"
	ReasonStoredFenceBad  Reason = "malformed_stored_fence"
	ReasonUnsupported     Reason = "unsupported"
	ReasonPrecondition    Reason = "precondition_failed"
	ReasonBadRequest      Reason = "bad_request"
	ReasonLeaseReadError  Reason = "lease_read_error"
	ReasonAuthError       Reason = "authentication_error"
	ReasonTooManyTokens   Reason = "too_many_tokens"
	ReasonUpstreamError   Reason = "upstream_error"
	ReasonContention      Reason = "contention"
	ReasonOverloaded      Reason = "overloaded"
	ReasonUpstreamAnswer  Reason = "upstream_answer"
	ReasonMissingResource Reason = "not_found"
	ReasonBadPath         Reason = "bad_path"
	ReasonSuperseded      Reason = "superseded"
	ReasonBadBody         Reason = "bad_body"
	ReasonNoShard         Reason = "no_shard"
)

// S3 error codes of the gateway's own rejections (besides S3's AccessDenied,
// NotImplemented, PreconditionFailed, ServiceUnavailable...).
const (
	CodeStaleFence      = "FencedLeaseStaleFence"
	CodeNotHolder       = "NotHolder"
	CodeNoHolder        = "NoHolder"
	CodeInvalidFence    = "InvalidFence"
	CodeMissingFence    = "MissingFence"
	CodeUnknownFence    = "UnknownFence"
	CodeMissingToken    = "MissingToken"
	CodeInvalidToken    = "InvalidToken"
	CodeStoredFenceBad  = "InvalidStoredFence"
	CodeAccessDenied    = "AccessDenied"
	CodeNotImplemented  = "NotImplemented"
	CodeUnavailable     = "ServiceUnavailable"
	CodeSlowDown        = "SlowDown"
	CodePrecondition    = "PreconditionFailed"
	CodeInvalidArgument = "InvalidArgument"
	CodeInvalidURI      = "InvalidURI"
	CodeInvalidRequest  = "InvalidRequest"
	CodeNoSuchKey       = "NoSuchKey"
	CodeNoSuchShard     = "NoSuchShard"
)

// Decision is the answer to a request.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Status, Code and Message make the S3 error response of a denial.
	Status  int
	Code    string
	Message string
	// Fence is the caller's fence, once it parsed.
	Fence int64
	// StaleWrite says that a pod tried to write as a holder it is not (an
	// old fence, or another pod's): the FencedLease gets a
	// StaleWriteRejected Event, as from the fencing webhook.
	StaleWrite bool
}

func deny(status int, code string, reason Reason, format string, args ...any) Decision {
	return Decision{Status: status, Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Write names a write for messages.
type Write struct {
	Route  Route
	Bucket string
	Key    string
}

func (w Write) String() string { return w.Bucket + "/" + w.Key }

// Admit decides whether the caller may write as the holder of the route's
// FencedLease: a pod of the route's namespace, with a canonical fence equal
// to the committed grant's, and the grant's holder pod. grant is the
// committed grant read from the API server just now; grantErr says why
// there is none.
func Admit(w Write, c Caller, fenceHeader string, grant Grant, grantErr error) Decision {
	fl := w.Route.Lock()
	if c.Namespace != w.Route.Namespace {
		return deny(http.StatusForbidden, CodeAccessDenied, ReasonWrongNamespace,
			"write to %s denied: %s is routed to %s, and user %s is not a service account of namespace %s", w, w, fl, c.Username, w.Route.Namespace)
	}
	if fenceHeader == "" {
		return deny(http.StatusBadRequest, CodeMissingFence, ReasonMissingFence,
			"write to %s denied: it carries no %s header; %s protects it", w, HeaderFence, fl)
	}
	f, err := record.ParseFence(fenceHeader)
	if err != nil {
		return deny(http.StatusBadRequest, CodeInvalidFence, ReasonMalformedFence, "write to %s denied: header %s: %v (%s)", w, HeaderFence, err, fl)
	}
	d := Decision{Fence: f}
	switch {
	case errors.Is(grantErr, ErrNoShard):
		d = deny(http.StatusBadRequest, CodeNoSuchShard, ReasonNoShard, "write to %s with fence %d denied: %v", w, f, grantErr)
	case grantErr != nil:
		d = deny(http.StatusForbidden, CodeNoHolder, ReasonNoHolder, "write to %s with fence %d denied: %s has no holder: %v", w, f, fl, grantErr)
	case f < grant.Fence:
		d = deny(http.StatusForbidden, CodeStaleFence, ReasonStaleFence,
			"write to %s with fence %d denied: stale fence, %s is held with fence %d by pod %s", w, f, fl, grant.Fence, grant.HolderPod)
		d.StaleWrite = c.PodUID != ""
	case f > grant.Fence:
		d = deny(http.StatusForbidden, CodeUnknownFence, ReasonUnknownFence,
			"write to %s with fence %d denied: %s never granted it, its current fence is %d", w, f, fl, grant.Fence)
	case c.PodUID == "":
		d = deny(http.StatusForbidden, CodeNotHolder, ReasonNotHolder,
			"write to %s with fence %d denied: user %s is not a pod (a token bound to a pod is needed); %s is held with fence %d by pod %s",
			w, f, c.Username, fl, grant.Fence, grant.HolderPod)
	case c.PodUID != grant.HolderUID:
		d = deny(http.StatusForbidden, CodeNotHolder, ReasonNotHolder,
			"write to %s with fence %d denied: pod %s (UID %s) is not the holder, %s is held with fence %d by pod %s (UID %s)",
			w, f, c.PodName, c.PodUID, fl, grant.Fence, grant.HolderPod, grant.HolderUID)
		d.StaleWrite = true
	default:
		return Decision{Allowed: true, Reason: ReasonHolder, Fence: f}
	}
	d.Fence = f
	return d
}

// CheckStored decides on the fence stored with the object (its MetaFence
// user metadata; stored is "" when the object or the metadata is absent):
// the write's fence must not be lower, the seeds' "WHERE last_fence <=
// :fence". An equal fence is the same grant, so the same holder, writing
// again.
func CheckStored(w Write, f int64, stored string) Decision {
	if stored == "" {
		return Decision{Allowed: true, Reason: ReasonHolder, Fence: f}
	}
	s, err := record.ParseFence(stored)
	if err != nil {
		return deny(http.StatusConflict, CodeStoredFenceBad, ReasonStoredFenceBad,
			"write to %s with fence %d denied: the object's stored fence (x-amz-meta-%s) is invalid: %v; %s; repair or remove the object",
			w, f, MetaFence, err, w.Route.Lock())
	}
	if s > f {
		d := deny(http.StatusForbidden, CodeStaleFence, ReasonObjectFence,
			"write to %s with fence %d denied: the object was written with fence %d, a newer grant of %s", w, f, s, w.Route.Lock())
		d.Fence, d.StaleWrite = f, true
		return d
	}
	return Decision{Allowed: true, Reason: ReasonHolder, Fence: f}
}

// Superseded is the answer to a write of fence f whose upload was aborted
// because a write of a newer grant (fence newer, admitted on the Lease read
// from the API server) arrived for the same key: the newer holder's write
// does not wait behind a stale upload, and the stale one is not written.
func Superseded(w Write, f, newer int64) Decision {
	d := deny(http.StatusForbidden, CodeStaleFence, ReasonSuperseded,
		"write to %s with fence %d denied: a write with fence %d, a newer grant of %s, arrived while it was in flight (nothing was written)", w, f, newer, w.Route.Lock())
	d.Fence, d.StaleWrite = f, true
	return d
}
