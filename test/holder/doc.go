// Package holder tests holder renewal (spec.renewal: Holder) end to end:
// the operator against a real API server, and holders that renew their own
// grants with their pods' bound service-account tokens, through the fence
// package's Session, under the admission policy that lets them.
package holder
