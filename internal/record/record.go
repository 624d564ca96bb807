package record

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
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

// NewerVersion reports whether resourceVersion a is newer than b (etcd
// revisions, decimal numbers); anything else that differs counts as newer.
func NewerVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}

// BeatsOf reads the heartbeat Lease's count of renewals (HeartbeatBeats):
// anything that does not parse counts as none, 0.
func BeatsOf(annotations map[string]string) int64 { return FenceOf(annotations[HeartbeatBeats]) }

// FormatBeats writes the heartbeat Lease's count of renewals.
func FormatBeats(n int64) string { return strconv.FormatInt(n, 10) }
