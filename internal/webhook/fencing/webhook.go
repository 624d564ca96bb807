package fencing

import (
	"context"
	"fmt"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	rules "github.com/fencedlease/fencedlease/internal/fencing"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
)

// Path is where the webhook server serves the fencing webhook, under the
// path token of the endpoint (Path/<token>); the ValidatingWebhookConfiguration
// in config/webhook/fencing.yaml calls Path, and the endpoint adds the token.
const Path = "/validate-fencedlease-protected"

// recorderName is the reporting controller of the webhook's Events.
const recorderName = "fencedlease"

// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the fencing webhook.
type Options struct {
	// OperatorUsers, BreakGlassUsers and BreakGlassGroups write protected
	// objects without a fence; see setup.WebhookOptions.
	OperatorUsers    []string
	BreakGlassUsers  []string
	BreakGlassGroups []string
	// Cache reads FencedLeases for the decision. Defaults to the manager's
	// client, which reads from the informer cache. Tests inject a cache that
	// lags on purpose.
	Cache client.Reader
	// APIReader reads a FencedLease from the API server when the cache may
	// lag behind a newer grant. Defaults to the manager's API reader.
	APIReader client.Reader
	// Endpoint serves the webhook under its secret path; required.
	Endpoint *endpoint.Endpoint
}

// Add registers the fencing webhook with the manager's webhook server.
func Add(mgr ctrl.Manager, o Options) error {
	if o.Endpoint == nil {
		return fmt.Errorf("the fencing webhook needs an endpoint to be served from")
	}
	if o.Cache == nil {
		o.Cache = mgr.GetClient()
		// Start the FencedLease informer with the cache rather than on the
		// first admission request.
		if _, err := mgr.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedLease{}); err != nil {
			return fmt.Errorf("get FencedLease informer for the fencing webhook: %w", err)
		}
	}
	if o.APIReader == nil {
		o.APIReader = mgr.GetAPIReader()
	}
	m, err := newMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	h := &Handler{
		Principals: rules.Principals{
			OperatorUsers:    o.OperatorUsers,
			BreakGlassUsers:  o.BreakGlassUsers,
			BreakGlassGroups: o.BreakGlassGroups,
		},
		Cache:     o.Cache,
		APIReader: o.APIReader,
		Recorder:  mgr.GetEventRecorder(recorderName),
		metrics:   m,
	}
	o.Endpoint.Register(mgr.GetWebhookServer(), Path, &webhook.Admission{Handler: h})
	return nil
}

// Handler decides admission requests for protected ConfigMaps and Secrets.
type Handler struct {
	Principals rules.Principals
	// Cache and APIReader read FencedLeases: see Options.
	Cache     client.Reader
	APIReader client.Reader
	// Recorder records StaleWriteRejected and BreakGlassWrite Events on the
	// FencedLease.
	Recorder events.EventRecorder
	metrics  *handlerMetrics
}

var _ admission.Handler = &Handler{}
