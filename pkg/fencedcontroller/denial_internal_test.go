package fencedcontroller

import (
	"fmt"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// webhookDenial is the error the API server returns for a denial of the
// fencing webhook with message msg (as apiserver's webhook errors build
// it from the webhook's admission.Denied).
func webhookDenial(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden,
		Reason: metav1.StatusReasonForbidden, Message: fmt.Sprintf("admission webhook %q denied the request: %s", "protected.fencedlease.io", msg)}}
}

// TestDenialsAreRecognised: of the fencing webhook's denials, as
// internal/fencing words them, the client holding the grant with fence 12
// recognises those of a write it sent without its fence (none at all, or
// the older one the stored object carried over) and of a delete of an
// object not last written with its fence; a client whose grant is older
// only the first (its fence would be refused too), and every other denial
// is returned, never retried.
func TestDenialsAreRecognised(t *testing.T) {
	holder := &fencing.Holder{PodName: "a", PodUID: "uid-a"}
	lease := fencing.Lease{Found: true, Fence: 12, Holder: holder}
	pod := fencing.Caller{Username: "system:serviceaccount:team-a:default", PodName: "a", PodUID: "uid-a"}
	labelled := func(fenceValue string) *fencing.Object {
		o := &fencing.Object{Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "widgets"}, Annotations: map[string]string{}}
		if fenceValue != "" {
			o.Annotations[fencingv1alpha1.AnnotationFence] = fenceValue
		}
		return o
	}
	req := func(op fencing.Operation, old, new *fencing.Object, caller fencing.Caller) fencing.Request {
		return fencing.Request{Operation: op, Kind: "ConfigMap", Namespace: "team-a", Name: "state", Old: old, New: new, Caller: caller}
	}
	other := fencing.Caller{Username: "system:serviceaccount:team-a:default", PodName: "b", PodUID: "uid-b"}
	for _, tc := range []struct {
		name   string
		r      fencing.Request
		lease  fencing.Lease
		reason fencing.Reason
		// unstamped and olderWrite are the answers for the holder of fence
		// 12; for a holder of fence 10 only a write without any fence is
		// sent again (it cannot know that it is stale; stamped, its write is
		// refused as such).
		unstamped, olderWrite bool
	}{
		{"update without a fence", req(fencing.Update, labelled(""), labelled(""), pod), lease, fencing.ReasonMissingFence, true, false},
		{"create without a fence", req(fencing.Create, nil, labelled(""), pod), lease, fencing.ReasonMissingFence, true, false},
		{"update carrying the stored older fence", req(fencing.Update, labelled("10"), labelled("10"), pod), lease, fencing.ReasonStaleFence, true, false},
		{"delete of an older write", req(fencing.Delete, labelled("10"), nil, pod), lease, fencing.ReasonDeleteOlderWrite, false, true},
		{"delete of an object without a fence", req(fencing.Delete, labelled(""), nil, pod), lease, fencing.ReasonDeleteOlderWrite, false, true},
		{"stale holder", req(fencing.Update, labelled("12"), labelled("12"), pod), fencing.Lease{Found: true, Fence: 14, Holder: holder}, fencing.ReasonStaleFence, false, false},
		{"not the holder", req(fencing.Update, labelled("12"), labelled("12"), other), lease, fencing.ReasonNotHolder, false, false},
		{"delete by another pod", req(fencing.Delete, labelled("12"), nil, other), lease, fencing.ReasonNotHolder, false, false},
		{"no holder", req(fencing.Update, labelled("12"), labelled("12"), pod), fencing.Lease{Found: true, Fence: 12}, fencing.ReasonNoHolder, false, false},
		{"label removed", req(fencing.Update, labelled("12"), &fencing.Object{Annotations: map[string]string{fencingv1alpha1.AnnotationFence: "12"}}, pod), lease, fencing.ReasonLabelChanged, false, false},
		{"malformed fence", req(fencing.Update, labelled("12"), labelled("012"), pod), lease, fencing.ReasonMalformedFence, false, false},
		{"unknown fence carried over", req(fencing.Update, labelled("99"), labelled("99"), pod), lease, fencing.ReasonStaleFence, false, false},
		{"unknown fence on a delete", req(fencing.Delete, labelled("99"), nil, pod), lease, fencing.ReasonUnknownFence, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := fencing.Decide(tc.r, tc.lease, fencing.Principals{})
			g.Expect(d.Allowed).To(BeFalse())
			if tc.name != "unknown fence carried over" {
				g.Expect(d.Reason).To(Equal(tc.reason))
			}
			err := fmt.Errorf("update ConfigMap team-a/state: %w", webhookDenial(d.Message))
			g.Expect(unstamped(err, 12)).To(Equal(tc.unstamped), "%v", err)
			g.Expect(olderWrite(err, 12)).To(Equal(tc.olderWrite), "%v", err)
			g.Expect(unstamped(err, 10)).To(Equal(tc.reason == fencing.ReasonMissingFence), "%v", err)
			g.Expect(olderWrite(err, 10)).To(BeFalse(), "%v", err)
		})
	}
	// A status write of a protected object without a fence in its field
	// manager: where the webhook refuses it, it refuses it for its missing
	// fence, in words the client recognises.
	g := NewWithT(t)
	status := req(fencing.Update, labelled(""), labelled(""), pod)
	status.SubResource, status.Kind = "status", "Widget"
	if d := fencing.Decide(status, lease, fencing.Principals{}); !d.Allowed {
		g.Expect(d.Reason).To(Equal(fencing.ReasonMissingFence), d.Message)
		g.Expect(unstamped(webhookDenial(d.Message), 12)).To(BeTrue(), d.Message)
	}
	// The same words from anything but the fencing webhook are not its.
	d := fencing.Decide(req(fencing.Update, labelled(""), labelled(""), pod), lease, fencing.Principals{})
	g.Expect(unstamped(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "state", fmt.Errorf("%s", d.Message)), 12)).To(BeFalse())
	g.Expect(unstamped(nil, 12)).To(BeFalse())
}

// TestOwnConflict: an apply conflict is this client's own, and taken over
// with force, only when every cause is the fence annotation or a field of
// the same base field manager under another fence.
func TestOwnConflict(t *testing.T) {
	conflict := func(causes ...metav1.StatusCause) error {
		return apierrors.NewApplyConflict(causes, "Apply failed")
	}
	cause := func(field, manager string) metav1.StatusCause {
		return metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Field: field, Message: "conflict with " + manager}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the fence annotation, by an update manager", conflict(cause(".metadata.annotations.fencedlease.io/fence", `"widget-controller" using v1`)), true},
		{"the fence annotation, by another manager", conflict(cause(".metadata.annotations.fencedlease.io/fence", `"kubectl-edit" using v1 at 2026-12-05T10:00:00Z`)), true},
		{"status fields of the same manager under another fence", conflict(
			cause(".status.message", `"widget-controller;fencedlease.io/fence=10" with subresource "status"`),
			cause(".status.fence", `"widget-controller;fencedlease.io/fence=10" with subresource "status"`)), true},
		{"a field of another manager", conflict(cause(".spec.slot", `"kubectl" using v1`)), false},
		{"the fence and a field of another manager", conflict(
			cause(".metadata.annotations.fencedlease.io/fence", `"widget-controller" using v1`), cause(".data.k", `"other" using v1`)), false},
		{"a field of another base manager with a fence", conflict(cause(".status.message", `"other-controller;fencedlease.io/fence=10" with subresource "status"`)), false},
		{"a field of the same manager under the current fence", conflict(cause(".status.message", `"widget-controller;fencedlease.io/fence=12" with subresource "status"`)), false},
		{"a field of the same manager without a fence", conflict(cause(".status.message", `"widget-controller" using v1`)), false},
		{"no causes", conflict(), false},
		{"a plain conflict", apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "state", fmt.Errorf("changed")), false},
		{"no error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(ownConflict(tc.err, "widget-controller", 12)).To(Equal(tc.want))
		})
	}
}

func TestLabelProtectedByIsTheAPIs(t *testing.T) {
	NewWithT(t).Expect(LabelProtectedBy).To(Equal(fencingv1alpha1.LabelProtectedBy))
}
