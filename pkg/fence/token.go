package fence

import (
	"fmt"

	"github.com/fencedlease/fencedlease/internal/record"
)

// File and directory names of the downward-API volume. They match the pod
// annotations written by the operator.
const (
	// DefaultDir is where the operator mounts the token files in every container.
	DefaultDir = "/etc/fencedlease"
	// FenceFile holds the decimal fencing token on the holder and is empty on standbys.
	FenceFile = "fence"
	// RoleFile holds RoleHolder or RoleStandby.
	RoleFile = "role"
	// LeaseFile holds the name of the FencedLease.
	LeaseFile = "lease"
	// InjectLabel opts a pod in to the token files; its value must be "true".
	InjectLabel = record.LabelInject
)

// Role says whether this pod currently holds the lease.
type Role string

// Roles published in the role file.
const (
	RoleHolder  Role = record.RoleHolder
	RoleStandby Role = record.RoleStandby
)

// Token is one consistent reading of the token files.
type Token struct {
	// Role is RoleHolder or RoleStandby. An empty role file (the operator
	// has not decided yet) reads as RoleStandby.
	Role Role
	// Fence is the fencing token; it is set only when Role is RoleHolder.
	// A standby's fence file is ignored so that a standby never carries a
	// number it could write with.
	Fence int64
	// Lease is the name of the FencedLease.
	Lease string
}

// IsHolder reports whether the token grants holdership: role holder and a
// valid fence.
func (t Token) IsHolder() bool {
	return t.Role == RoleHolder && t.Fence > 0
}

// String formats the token for logs.
func (t Token) String() string {
	if t.IsHolder() {
		return fmt.Sprintf("holder of %q with fence %d", t.Lease, t.Fence)
	}
	return fmt.Sprintf("%s of %q", t.Role, t.Lease)
}

// ParseFence parses a fencing token. Only the canonical form is accepted: a
// positive decimal int64 of ASCII digits without sign, leading zeros or
// whitespace. The operator's webhook applies the same rule, so a token that
// parses here is a token the destination will understand the same way.
func ParseFence(s string) (int64, error) { return record.ParseFence(s) }

// parseRole parses the content of the role file.
func parseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleHolder, RoleStandby:
		return Role(s), nil
	case "":
		return RoleStandby, nil
	}
	return "", fmt.Errorf("unknown role %q (want %q or %q)", s, RoleHolder, RoleStandby)
}
