package record

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// The names of the records, as api/v1alpha1 documents them.
const (
	Prefix = "fencedlease.io/"

	// On a pod: the publication.
	LabelLease      = Prefix + "lease"
	AnnotationLease = Prefix + "lease"
	AnnotationRole  = Prefix + "role"
	AnnotationFence = Prefix + "fence"
	AnnotationGrant = Prefix + "grant"

	// On a FencedLease's Lease: the grant (and AnnotationFence, its last
	// committed fence).
	LeaseHolderUID     = Prefix + "holder-uid"
	LeaseState         = Prefix + "state"
	LeaseRenewal       = Prefix + "renewal"
	LeaseRenewInterval = Prefix + "renew-interval"
	LeaseHandoff       = Prefix + "handoff"
	LeaseVouchedBy     = Prefix + "vouched-by"
	LeaseDuration      = Prefix + "lease-duration"
	HeartbeatBeats     = Prefix + "beats"
	// LabelHeartbeat marks the operator's heartbeat Lease.
	LabelHeartbeat = Prefix + "heartbeat"

	// LabelInject opts a pod in to the pod webhook, which mounts its token
	// files.
	LabelInject = Prefix + "inject"
)

// Values of LeaseState.
const (
	StatePending  = "pending"
	StateHeld     = "held"
	StateRevoked  = "revoked"
	StateReleased = "released"
)

// Values of AnnotationRole and LeaseRenewal.
const (
	RoleHolder      = "holder"
	RoleStandby     = "standby"
	RenewalOperator = "Operator"
	RenewalHolder   = "Holder"
)

// ParseFence parses a fencing token. Only the canonical form is accepted: a
// positive decimal int64 of ASCII digits without sign, leading zeros or
// whitespace. The webhook, the gateway and the workload library all parse
// with it, so a token one accepts is a token the others read the same way.
func ParseFence(s string) (int64, error) {
	reason := fenceSyntax(s)
	if reason == "" {
		n, err := strconv.ParseInt(s, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			reason = "out of range for int64"
		case err != nil:
			reason = err.Error()
		case n == 0:
			reason = "must be positive"
		default:
			return n, nil
		}
	}
	return 0, fmt.Errorf("invalid fence %q: %s", s, reason)
}

// fenceSyntax returns why s is not a canonical decimal, or "".
func fenceSyntax(s string) string {
	if s == "" {
		return "empty"
	}
	for _, r := range s {
		if unicode.IsSpace(r) {
			return "whitespace not allowed"
		}
	}
	if s[0] == '+' || s[0] == '-' {
		return "sign not allowed"
	}
	for _, r := range s {
		if r > unicode.MaxASCII {
			return "non-ASCII character"
		}
		if r < '0' || r > '9' {
			return "not a decimal integer"
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return "leading zero"
	}
	return ""
}

// FenceOf reads a fence that the operator wrote, or that a record may
// carry: anything that does not parse counts as none, 0.
func FenceOf(s string) int64 {
	n, err := ParseFence(s)
	if err != nil {
		return 0
	}
	return n
}

// FormatFence writes a fence.
func FormatFence(n int64) string { return strconv.FormatInt(n, 10) }

// FenceFromResourceVersion derives the fence of a grant from the Lease's
// resourceVersion after the grant write. etcd resourceVersions are revision
// numbers; storage that hands out anything else cannot provide a fence.
func FenceFromResourceVersion(rv string) (int64, error) {
	n, err := ParseFence(rv)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a positive decimal int64, so it cannot be a fence", rv)
	}
	return n, nil
}

// CompareVersions orders two resourceVersions as KEP-5504 defines them:
// both are etcd revisions, decimal numbers without sign or leading zeros.
// ok is false when either is not, and the two cannot be ordered. It is
// the one comparison of resourceVersions in fencedlease: every other
// reading of the order is one of the two below.
func CompareVersions(a, b string) (cmp int, ok bool) {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return cmp, err == nil
}

// Newer says whether resourceVersion a is known to be newer than b. Where
// "newer" is trusted (a heartbeat renewed, the store gone back in time, a
// write of this process ahead of its cache), a version that cannot be
// ordered is not newer: nothing is trusted on a guess.
func Newer(a, b string) bool {
	cmp, ok := CompareVersions(a, b)
	return ok && cmp > 0
}

// MaybeNewer says whether resourceVersion a may be newer than b: b is
// empty (nothing seen yet), or a is neither b nor known to be older. Where
// "newer" only makes a reader look (a Lease not to ignore, a cache that may
// be ahead, a renewal that may restart a clock, which can only make the
// operator wait longer), a version that cannot be ordered is looked at.
func MaybeNewer(a, b string) bool {
	if b == "" {
		return true
	}
	if a == b {
		return false
	}
	cmp, ok := CompareVersions(a, b)
	return !ok || cmp > 0
}

// BeatsOf reads the heartbeat Lease's count of renewals (HeartbeatBeats):
// anything that does not parse counts as none, 0.
func BeatsOf(annotations map[string]string) int64 { return FenceOf(annotations[HeartbeatBeats]) }

// WriteBeats writes the heartbeat Lease's label, which marks it as the
// heartbeat, and its count of renewals into its annotations.
func WriteBeats(labels, annotations map[string]string, n int64) {
	labels[LabelHeartbeat] = "true"
	annotations[HeartbeatBeats] = strconv.FormatInt(n, 10)
}

// IsHeartbeat says whether a Lease's labels mark it as the heartbeat.
func IsHeartbeat(labels map[string]string) bool { return labels[LabelHeartbeat] != "" }
