package fencing

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	rules "github.com/fencedlease/fencedlease/internal/fencing"
	"github.com/fencedlease/fencedlease/internal/holder"
)

// Handle decides one admission request and counts the decision: in
// fencedlease_webhook_decisions_total, or, for a dry run, in
// fencedlease_webhook_dry_run_decisions_total.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result, reason := h.handle(ctx, req)
	h.metrics.observe(resourceLabel(req), result, reason, ptr.Deref(req.DryRun, false), time.Since(start))
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request) (admission.Response, string, string) {
	log := ctrl.LoggerFrom(ctx)
	if err := checkResource(req); err != nil {
		log.V(1).Info("Refused a request for something other than a ConfigMap or Secret", "reason", err.Error())
		return admission.Errored(http.StatusBadRequest, err), resultError, reasonBadRequest
	}
	r, err := toRequest(req)
	if err != nil {
		log.Error(err, "Cannot read the admission request")
		return admission.Errored(http.StatusBadRequest, err), resultError, reasonBadRequest
	}
	// Whatever needs no FencedLease is decided first: a caller that is not
	// a pod never costs a read.
	d, final := rules.Precheck(r, h.Principals)
	var fl *fencingv1alpha1.FencedLease
	if !final {
		var lease rules.Lease
		if fl, lease, err = readLease(ctx, h.Cache, r.Namespace, d.Lease); err != nil {
			log.Error(err, "Cannot read the FencedLease from the cache")
			return admission.Errored(http.StatusInternalServerError, err), resultError, reasonReadError
		}
		d = rules.Decide(r, lease, false, h.Principals)
		if d.Reread {
			// The cache may lag behind a newer grant: decide on the
			// FencedLease as the API server has it, once.
			log.V(4).Info("Reading the FencedLease from the API server", "fencedLease", klog.KRef(r.Namespace, d.Lease), "cachedReason", d.Reason)
			if fl, lease, err = readLease(ctx, h.APIReader, r.Namespace, d.Lease); err != nil {
				log.Error(err, "Cannot read the FencedLease from the API server")
				return admission.Errored(http.StatusInternalServerError, err), resultError, reasonReadError
			}
			d = rules.Decide(r, lease, true, h.Principals)
		}
		if d.Reason == rules.ReasonUnknownFence && fl != nil {
			if d, err = h.decideOnLease(ctx, r, d, fl); err != nil {
				log.Error(err, "Cannot read the Lease of the FencedLease from the API server")
				return admission.Errored(http.StatusInternalServerError, err), resultError, reasonReadError
			}
		}
	}
	h.report(ctx, r, d, fl)
	if !d.Allowed {
		return admission.Denied(d.Message), resultDenied, string(d.Reason)
	}
	resp := admission.Allowed("")
	if d.Reason == rules.ReasonBreakGlass {
		note := fmt.Sprintf("recorded as an Event on FencedLease %q", d.Lease)
		if r.DryRun {
			note = "a dry run: nothing is recorded"
		}
		resp = resp.WithWarnings(fmt.Sprintf("break-glass write to %s %s/%s without a fence: %s", r.Kind, r.Namespace, r.Name, note))
	}
	return resp, resultAllowed, string(d.Reason)
}

// checkResource refuses anything but a ConfigMap or a Secret (the webhook
// configuration sends nothing else), before anything of the request is
// decoded or counted by its own values.
func checkResource(req admission.Request) error {
	want := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret"}[req.Resource.Resource]
	if req.Resource.Group != "" || want == "" || req.SubResource != "" || req.Kind.Group != "" || req.Kind.Kind != want {
		return fmt.Errorf("the fencing webhook decides writes to ConfigMaps and Secrets only, not to resource %q (kind %q)",
			req.Resource.String(), req.Kind.String())
	}
	return nil
}

// decideOnLease decides again a write whose fence is newer than the one the
// FencedLease's status records, as the API server has it: the grant may be
// committed on the Lease and its status patch not applied yet. With holder
// renewal the holder learns of its grant from the Lease, and may write in
// the milliseconds before the status records it. A grant committed on the
// Lease is as much a record as the status (the Lease that a FencedLease
// controls is written only by the operator, and by the holder for its
// renewTime and release alone: config/policy), so the write is decided on
// it when the Lease, read from the API server, is controlled by the
// FencedLease and holds a committed grant with exactly this fence. The other
// checks stand: the caller must be the pod that the grant names, and the
// stored fence order was checked already. Anything else keeps the denial.
func (h *Handler) decideOnLease(ctx context.Context, r rules.Request, d rules.Decision, fl *fencingv1alpha1.FencedLease) (rules.Decision, error) {
	l := &coordinationv1.Lease{}
	if err := h.APIReader.Get(ctx, client.ObjectKeyFromObject(fl), l); err != nil {
		if apierrors.IsNotFound(err) {
			return d, nil
		}
		return d, fmt.Errorf("get Lease %s: %w", klog.KObj(fl), err)
	}
	ann := l.Annotations
	uid := types.UID(ann[fencingv1alpha1.LeaseAnnotationHolderUID])
	if !metav1.IsControlledBy(l, fl) || ann[fencingv1alpha1.LeaseAnnotationState] != holder.StateHeld ||
		ann[fencingv1alpha1.AnnotationFence] != strconv.FormatInt(d.Fence, 10) || uid == "" {
		return d, nil
	}
	ctrl.LoggerFrom(ctx).V(4).Info("Deciding on the grant committed on the Lease, newer than the status", "lease", klog.KObj(l), "fence", d.Fence)
	committed := rules.Lease{Found: true, Fence: d.Fence, Holder: &rules.Holder{PodName: ptr.Deref(l.Spec.HolderIdentity, ""), PodUID: uid}}
	return rules.Decide(r, committed, true, h.Principals), nil
}

// readLease reads the FencedLease that protects an object. A FencedLease that
// does not exist is not an error: Lease.Found is false.
func readLease(ctx context.Context, r client.Reader, namespace, name string) (*fencingv1alpha1.FencedLease, rules.Lease, error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, fl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, rules.Lease{}, nil
		}
		return nil, rules.Lease{}, fmt.Errorf("get FencedLease %s: %w", klog.KRef(namespace, name), err)
	}
	l := rules.Lease{Found: true, Fence: fl.Status.Fence}
	if h := fl.Status.Holder; h != nil {
		l.Holder = &rules.Holder{PodName: h.PodName, PodUID: h.PodUID}
	}
	return fl, l, nil
}
