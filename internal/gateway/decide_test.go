package gateway

import (
	"errors"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

var (
	route   = Route{Bucket: "reports", Prefix: "monthly/", Namespace: "billing", FencedLease: "exporter"}
	write   = Write{Route: route, Bucket: "reports", Key: "monthly/2026-11.csv"}
	grant   = Grant{Fence: 42, HolderPod: "b", HolderUID: "uid-b", OwnerUID: "fl"}
	holderB = Caller{Username: "system:serviceaccount:billing:default", Namespace: "billing", PodName: "b", PodUID: "uid-b"}
	podA    = Caller{Username: "system:serviceaccount:billing:default", Namespace: "billing", PodName: "a", PodUID: "uid-a"}
)

func TestAdmit(t *testing.T) {
	tests := []struct {
		name     string
		caller   Caller
		fence    string
		grantErr error
		want     Decision
	}{
		{name: "holder with its fence", caller: holderB, fence: "42", want: Decision{Allowed: true, Reason: ReasonHolder, Fence: 42}},
		{name: "stale holder (the seeds' A)", caller: podA, fence: "41", want: Decision{Status: 403, Code: "FencedLeaseStaleFence", Reason: ReasonStaleFence, Fence: 41, StaleWrite: true,
			Message: "write to reports/monthly/2026-11.csv with fence 41 denied: stale fence, FencedLease billing/exporter is held with fence 42 by pod b"}},
		{name: "holder with an old fence", caller: holderB, fence: "41", want: Decision{Status: 403, Code: "FencedLeaseStaleFence", Reason: ReasonStaleFence, Fence: 41, StaleWrite: true,
			Message: "write to reports/monthly/2026-11.csv with fence 41 denied: stale fence, FencedLease billing/exporter is held with fence 42 by pod b"}},
		{name: "standby with the current fence", caller: podA, fence: "42", want: Decision{Status: 403, Code: "NotHolder", Reason: ReasonNotHolder, Fence: 42, StaleWrite: true,
			Message: "write to reports/monthly/2026-11.csv with fence 42 denied: pod a (UID uid-a) is not the holder, FencedLease billing/exporter is held with fence 42 by pod b (UID uid-b)"}},
		{name: "a fence never granted", caller: holderB, fence: "43", want: Decision{Status: 403, Code: "UnknownFence", Reason: ReasonUnknownFence, Fence: 43,
			Message: "write to reports/monthly/2026-11.csv with fence 43 denied: FencedLease billing/exporter never granted it, its current fence is 42"}},
		{name: "service account token not bound to a pod", caller: Caller{Username: "system:serviceaccount:billing:default", Namespace: "billing"}, fence: "42",
			want: Decision{Status: 403, Code: "NotHolder", Reason: ReasonNotHolder, Fence: 42,
				Message: "write to reports/monthly/2026-11.csv with fence 42 denied: user system:serviceaccount:billing:default is not a pod (a token bound to a pod is needed); FencedLease billing/exporter is held with fence 42 by pod b"}},
		{name: "pod of another namespace", caller: Caller{Username: "system:serviceaccount:other:default", Namespace: "other", PodName: "b", PodUID: "uid-b"}, fence: "42",
			want: Decision{Status: 403, Code: "AccessDenied", Reason: ReasonWrongNamespace,
				Message: "write to reports/monthly/2026-11.csv denied: reports/monthly/2026-11.csv is routed to FencedLease billing/exporter, and user system:serviceaccount:other:default is not a service account of namespace billing"}},
		{name: "no fence", caller: holderB, fence: "", want: Decision{Status: 400, Code: "MissingFence", Reason: ReasonMissingFence,
			Message: "write to reports/monthly/2026-11.csv denied: it carries no X-Fencedlease-Fence header; FencedLease billing/exporter protects it"}},
		{name: "leading zero", caller: holderB, fence: "042", want: Decision{Status: 400, Code: "InvalidFence", Reason: ReasonMalformedFence,
			Message: `write to reports/monthly/2026-11.csv denied: header X-Fencedlease-Fence: invalid fence "042": leading zero (FencedLease billing/exporter)`}},
		{name: "overflow", caller: holderB, fence: "9223372036854775808", want: Decision{Status: 400, Code: "InvalidFence", Reason: ReasonMalformedFence,
			Message: `write to reports/monthly/2026-11.csv denied: header X-Fencedlease-Fence: invalid fence "9223372036854775808": out of range for int64 (FencedLease billing/exporter)`}},
		{name: "negative", caller: holderB, fence: "-42", want: Decision{Status: 400, Code: "InvalidFence", Reason: ReasonMalformedFence,
			Message: `write to reports/monthly/2026-11.csv denied: header X-Fencedlease-Fence: invalid fence "-42": sign not allowed (FencedLease billing/exporter)`}},
		{name: "no grant", caller: holderB, fence: "42", grantErr: errors.New("the Lease billing/exporter has no committed grant (state revoked)"),
			want: Decision{Status: 403, Code: "NoHolder", Reason: ReasonNoHolder, Fence: 42,
				Message: "write to reports/monthly/2026-11.csv with fence 42 denied: FencedLease billing/exporter has no holder: the Lease billing/exporter has no committed grant (state revoked)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			gr := grant
			if tc.grantErr != nil {
				gr = Grant{}
			}
			g.Expect(Admit(write, tc.caller, tc.fence, gr, tc.grantErr)).To(Equal(tc.want))
		})
	}
}

func TestCheckStored(t *testing.T) {
	tests := []struct {
		name   string
		fence  int64
		stored string
		want   Decision
	}{
		{name: "new object", fence: 42, stored: "", want: Decision{Allowed: true, Reason: ReasonHolder, Fence: 42}},
		{name: "lower stored fence", fence: 42, stored: "41", want: Decision{Allowed: true, Reason: ReasonHolder, Fence: 42}},
		{name: "equal stored fence: the holder writes again", fence: 42, stored: "42", want: Decision{Allowed: true, Reason: ReasonHolder, Fence: 42}},
		{name: "higher stored fence", fence: 41, stored: "42", want: Decision{Status: http.StatusForbidden, Code: "FencedLeaseStaleFence", Reason: ReasonObjectFence,
			Fence: 41, StaleWrite: true,
			Message: "write to reports/monthly/2026-11.csv with fence 41 denied: the object was written with fence 42, a newer grant of FencedLease billing/exporter"}},
		{name: "malformed stored fence", fence: 42, stored: "x", want: Decision{Status: http.StatusConflict, Code: "InvalidStoredFence", Reason: ReasonStoredFenceBad,
			Message: `write to reports/monthly/2026-11.csv with fence 42 denied: the object's stored fence (x-amz-meta-fencedlease-fence) is invalid: invalid fence "x": not a decimal integer; FencedLease billing/exporter; repair or remove the object`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(CheckStored(write, tc.fence, tc.stored)).To(Equal(tc.want))
		})
	}
}

func TestCallerFrom(t *testing.T) {
	g := NewWithT(t)
	g.Expect(callerFrom("system:serviceaccount:billing:default", map[string][]string{
		extraPodName: {"b"}, extraPodUID: {"uid-b"}})).To(Equal(holderB))
	g.Expect(callerFrom("alice", nil)).To(Equal(Caller{Username: "alice"}))
	// Two values are no identity.
	g.Expect(callerFrom("system:serviceaccount:billing:default", map[string][]string{extraPodUID: {"x", "y"}}).PodUID).To(BeEmpty())
}
