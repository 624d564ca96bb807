package fencing

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	rules "github.com/fencedlease/fencedlease/internal/fencing"
)

// Handle decides one admission request and counts the decision.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result, reason := h.handle(ctx, req)
	resource := req.Resource.Resource
	h.metrics.decisions.WithLabelValues(resource, result, reason).Inc()
	h.metrics.duration.WithLabelValues(resource, result).Observe(time.Since(start).Seconds())
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request) (admission.Response, string, string) {
	log := ctrl.LoggerFrom(ctx)
	r, err := toRequest(req)
	if err != nil {
		log.Error(err, "Cannot read the admission request")
		return admission.Errored(http.StatusBadRequest, err), resultError, reasonBadRequest
	}
	var (
		fl    *fencingv1alpha1.FencedLease
		lease rules.Lease
	)
	name, protected := rules.ProtectedBy(r)
	if protected && name != "" {
		if fl, lease, err = readLease(ctx, h.Cache, r.Namespace, name); err != nil {
			log.Error(err, "Cannot read the FencedLease from the cache")
			return admission.Errored(http.StatusInternalServerError, err), resultError, reasonReadError
		}
	}
	d := rules.Decide(r, lease, false, h.Principals)
	if d.Reread {
		// The cache may lag behind a newer grant: decide on the FencedLease
		// as the API server has it, once.
		log.V(4).Info("Reading the FencedLease from the API server", "fencedLease", klog.KRef(r.Namespace, name), "cachedReason", d.Reason)
		if fl, lease, err = readLease(ctx, h.APIReader, r.Namespace, name); err != nil {
			log.Error(err, "Cannot read the FencedLease from the API server")
			return admission.Errored(http.StatusInternalServerError, err), resultError, reasonReadError
		}
		d = rules.Decide(r, lease, true, h.Principals)
	}
	h.report(ctx, r, d, fl)
	if !d.Allowed {
		return admission.Denied(d.Message), resultDenied, string(d.Reason)
	}
	resp := admission.Allowed("")
	if d.Audit {
		resp = resp.WithWarnings(fmt.Sprintf("break-glass write to %s %s/%s without a fence: recorded as an Event on FencedLease %q", r.Kind, r.Namespace, r.Name, d.Lease))
	}
	return resp, resultAllowed, string(d.Reason)
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
