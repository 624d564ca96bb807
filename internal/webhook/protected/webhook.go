package protected

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fencing"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
)

// Path is where the webhook server serves the fencing webhook, under the
// path token of the endpoint (Path/<token>); the ValidatingWebhookConfiguration
// in config/webhook/fencing.yaml calls Path, and the endpoint adds the token.
const Path = "/validate-fencedlease-protected"

// recorderName is the reporting controller of the webhook's Events.
const recorderName = "fencedlease"

// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedshardsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the fencing webhook.
type Options struct {
	// OperatorUsers, BreakGlassUsers and BreakGlassGroups write protected
	// objects without a fence; see setup.WebhookOptions.
	OperatorUsers    []string
	BreakGlassUsers  []string
	BreakGlassGroups []string
	// Cache reads FencedLeases and FencedShardSets: which one protects an
	// object, and a set's shards. Defaults to the manager's client, which
	// reads from the informer cache. Tests inject a cache that lags on
	// purpose.
	Cache client.Reader
	// APIReader reads the grant, from the Lease of the FencedLease or of
	// the shard, for every decision that needs it, and a FencedLease or
	// FencedShardSet the cache does not have (yet). Defaults to the
	// manager's API reader.
	APIReader client.Reader
	// Endpoint serves the webhook under its secret path; required.
	Endpoint *endpoint.Endpoint
	// Resources lists what the webhook's configuration sends writes of: the
	// only requests it decides. coverage.DefaultResources (ConfigMaps and
	// Secrets) when nil.
	Resources ResourceLister
	// Mapper maps a resource to its kind, for the object of a subresource
	// write (scale) whose request carries none of its metadata.
	Mapper meta.RESTMapper
	// ScaleGuard, if set, guards the object of every admitted write that
	// leaves it protected, when the scale writes of its resource are
	// decided too (scale.go).
	ScaleGuard ScaleGuard
}

// ResourceLister lists the resources whose writes the webhook decides.
type ResourceLister interface {
	Listed(ctx context.Context) []coverage.Resource
}

// Add registers the fencing webhook with the manager's webhook server.
func Add(mgr ctrl.Manager, o Options) error {
	if o.Endpoint == nil {
		return fmt.Errorf("the fencing webhook needs an endpoint to be served from")
	}
	h, err := New(mgr, o)
	if err != nil {
		return err
	}
	o.Endpoint.Register(mgr.GetWebhookServer(), Path, &webhook.Admission{Handler: h})
	return nil
}

// New builds the webhook's handler on the manager's clients, recorder and
// metrics registry, without serving it.
func New(mgr ctrl.Manager, o Options) (*Handler, error) {
	if o.Cache == nil {
		o.Cache = mgr.GetClient()
		// Start the informers with the cache rather than on the first
		// admission request.
		if _, err := mgr.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedLease{}); err != nil {
			return nil, fmt.Errorf("get FencedLease informer for the fencing webhook: %w", err)
		}
		if _, err := mgr.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedShardSet{}); err != nil {
			return nil, fmt.Errorf("get FencedShardSet informer for the fencing webhook: %w", err)
		}
	}
	if o.APIReader == nil {
		o.APIReader = mgr.GetAPIReader()
	}
	if o.Mapper == nil {
		o.Mapper = mgr.GetRESTMapper()
	}
	m, err := newMetrics(metrics.Registry)
	if err != nil {
		return nil, err
	}
	h := NewHandler(o, mgr.GetEventRecorder(recorderName))
	h.metrics = m
	return h, nil
}

// NewHandler builds a handler on o's readers (both required) that records
// Events with recorder and counts nothing: for a program that decides
// requests as the webhook does without serving it, such as the simulation
// of internal/sim.
func NewHandler(o Options, recorder events.EventRecorder) *Handler {
	return &Handler{
		Principals: fencing.Principals{
			OperatorUsers:    o.OperatorUsers,
			BreakGlassUsers:  o.BreakGlassUsers,
			BreakGlassGroups: o.BreakGlassGroups,
		},
		Cache:      o.Cache,
		APIReader:  o.APIReader,
		Resources:  o.Resources,
		Mapper:     o.Mapper,
		ScaleGuard: o.ScaleGuard,
		Recorder:   recorder,
	}
}

// Handler decides admission requests for protected objects.
type Handler struct {
	Principals fencing.Principals
	// Cache and APIReader read FencedLeases, FencedShardSets and Leases,
	// Resources lists the resources decided, Mapper names kinds: see
	// Options.
	Cache     client.Reader
	APIReader client.Reader
	Resources ResourceLister
	Mapper    meta.RESTMapper
	// ScaleGuard guards objects whose scale writes are decided: see Options.
	ScaleGuard ScaleGuard
	// Recorder records StaleWriteRejected and BreakGlassWrite Events on the
	// FencedLease, or on the FencedShardSet of a shard.
	Recorder events.EventRecorder
	metrics  *handlerMetrics
}

var _ admission.Handler = &Handler{}
