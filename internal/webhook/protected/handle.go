package protected

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// Handle decides one admission request and counts the decision: in
// fencedlease_webhook_decisions_total, or, for a dry run, in
// fencedlease_webhook_dry_run_decisions_total.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	listed := h.listed(ctx)
	resp, result, reason := h.handle(ctx, req, listed)
	if h.metrics != nil {
		h.metrics.observe(resourceLabel(req, listed), result, reason, ptr.Deref(req.DryRun, false), time.Since(start))
	}
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request, listed []coverage.Resource) (admission.Response, string, string) {
	log := ctrl.LoggerFrom(ctx)
	if err := checkResource(req, listed); err != nil {
		log.V(1).Info("Refused a request for a resource the configuration does not list", "reason", err.Error())
		return admission.Errored(http.StatusBadRequest, err), resultError, reasonBadRequest
	}
	r, err := toRequest(req)
	if err == nil {
		err = h.subResourceMetadata(ctx, req, &r)
	}
	if err == nil {
		err = h.readOwners(ctx, &r, listed)
	}
	if err != nil {
		log.Error(err, "Cannot read the admission request")
		return admission.Errored(http.StatusBadRequest, err), resultError, reasonBadRequest
	}
	// Whatever needs no grant is decided first: a caller that is not a pod
	// never costs a read.
	d, final := fencing.Precheck(r, h.Principals)
	p, _ := fencing.ProtectedBy(r)
	var grantor client.Object
	if !final {
		var grant fencing.Lease
		if grantor, grant, err = h.grant(ctx, r.Namespace, p); err != nil {
			log.Error(err, "Cannot read the grant", "kind", p.Kind(), "protector", p.String())
			return admission.Errored(http.StatusInternalServerError, err), resultError, reasonReadError
		}
		d = fencing.Decide(r, grant, h.Principals)
	}
	h.report(ctx, r, d, p, grantor)
	if !d.Allowed {
		return admission.Denied(d.Message), resultDenied, string(d.Reason)
	}
	if err := h.guardScale(ctx, req, r, listed); err != nil {
		log.Error(err, "Cannot guard the scale writes of a protected object")
		return admission.Errored(http.StatusInternalServerError, err), resultError, reasonGuardError
	}
	resp := admission.Allowed("")
	if d.Reason == fencing.ReasonBreakGlass {
		note := fmt.Sprintf("recorded as an Event on %s %q", p.Kind(), p.Name)
		if r.DryRun {
			note = "a dry run: nothing is recorded"
		}
		resp = resp.WithWarnings(fmt.Sprintf("break-glass write to %s %s/%s without a fence: %s", r.Kind, r.Namespace, r.Name, note))
	}
	return resp, resultAllowed, string(d.Reason)
}

// checkResource refuses a request for a resource that the webhook's
// configuration does not list (it sends nothing else), before anything of
// the request is decoded or counted by its own values.
func checkResource(req admission.Request, listed []coverage.Resource) error {
	if !coverage.Covers(listed, req.Resource.Group, req.Resource.Resource, req.SubResource) {
		names := make([]string, len(listed))
		for i, r := range listed {
			names[i] = r.String()
		}
		sub := ""
		if req.SubResource != "" {
			sub = " subresource " + req.SubResource
		}
		return fmt.Errorf("the fencing webhook decides writes to the resources its configuration lists (%s), not to resource %q%s (kind %q)",
			strings.Join(names, ", "), req.Resource.String(), sub, req.Kind.String())
	}
	return nil
}
