package setup

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
	"github.com/fencedlease/fencedlease/internal/webhook/podinject"
	"github.com/fencedlease/fencedlease/internal/webhook/protected"
	"github.com/fencedlease/fencedlease/internal/webhook/scaleguard"
)

// Defaults of WebhookOptions: the names that both install paths give the
// objects with their defaults (config/default's namePrefix fencedlease-, the
// chart's release fencedlease), which the test suites install too
// (testenv.WithWebhooks). Both installs also pass the names with the flags,
// and rewrite the operator's RBAC resourceNames (config/webhook's names) to
// match.
const (
	// DefaultNamespace is the operator's namespace when $POD_NAMESPACE is
	// not set.
	DefaultNamespace = "fencedlease-system"
	// DefaultTokenSecret is the name of the Secret with the webhooks' path
	// token, in the operator's namespace.
	DefaultTokenSecret = "fencedlease-webhook-token"
	// DefaultFencingConfiguration is the ValidatingWebhookConfiguration of
	// the fencing webhook (config/webhook/fencing.yaml, "fencing" there).
	DefaultFencingConfiguration = "fencedlease-fencing"
	// DefaultPodConfiguration is the MutatingWebhookConfiguration of the pod
	// webhook (config/webhook/pods.yaml, "pod-injector" there).
	DefaultPodConfiguration = "fencedlease-pod-injector"
	// FencingWebhook is the name of the fencing webhook in its configuration.
	FencingWebhook = "protected.fencedlease.io"
	// ScaleWebhook is the name of the webhook of scale writes in the same
	// configuration, which the scale guard's matchCondition selects for.
	ScaleWebhook = "protected-scale.fencedlease.io"
)

// WebhookOptions configure the admission webhooks.
type WebhookOptions struct {
	// OperatorUsers are the user names the operator itself authenticates as
	// (its service account, "system:serviceaccount:<namespace>:<name>"). The
	// fencing webhook lets them write protected objects.
	OperatorUsers []string
	// BreakGlassUsers and BreakGlassGroups may write protected objects without
	// a token, for repairs by a person. Every such write is logged, recorded
	// as an Event and counted.
	BreakGlassUsers  []string
	BreakGlassGroups []string
	// TokenSecret keeps the path token of the webhooks (see
	// internal/webhook/endpoint); DefaultNamespace/DefaultTokenSecret if
	// empty.
	TokenSecret types.NamespacedName
	// FencingConfiguration and PodConfiguration name the webhook
	// configurations whose paths get the token, and whose coverage of a
	// namespace the controller reports; the defaults above if empty.
	FencingConfiguration, PodConfiguration string
	// MaxRequestBytes caps the body of an admission request;
	// endpoint.DefaultMaxRequestBytes if 0.
	MaxRequestBytes int64
	// ScaleGuard, if set, keeps the scale webhook to the objects that are
	// protected (internal/webhook/scaleguard): its matchCondition is written
	// with the path token, each admitted write that protects an object of a
	// resource whose scale is decided guards the object first, and the
	// leader resyncs the guard every ScaleGuardResync (a minute if zero).
	ScaleGuard       *scaleguard.Guard
	ScaleGuardResync time.Duration
	// WrapCache, if set, wraps the cached client the fencing webhook reads
	// FencedLeases from (tests use it to make that cache lag).
	WrapCache func(client.Client) client.Reader
}

func (o WebhookOptions) withDefaults() WebhookOptions {
	if o.TokenSecret.Namespace == "" {
		o.TokenSecret.Namespace = DefaultNamespace
	}
	if o.TokenSecret.Name == "" {
		o.TokenSecret.Name = DefaultTokenSecret
	}
	if o.FencingConfiguration == "" {
		o.FencingConfiguration = DefaultFencingConfiguration
	}
	if o.PodConfiguration == "" {
		o.PodConfiguration = DefaultPodConfiguration
	}
	return o
}

// WebhookEndpoint reads the path token of the webhooks from its Secret
// (creating it if there is none) and returns the endpoint that serves them
// under it; its controller keeps the token in the configurations' paths.
// AddWebhooks calls it; a test that registers a webhook of its own does too.
func WebhookEndpoint(ctx context.Context, mgr ctrl.Manager, opts WebhookOptions) (*endpoint.Endpoint, error) {
	opts = opts.withDefaults()
	// The API reader, not the cached client: a cache of Secrets would list
	// and watch them all.
	ep, err := endpoint.New(ctx, mgr.GetAPIReader(), mgr.GetClient(), endpoint.Options{
		TokenSecret:             opts.TokenSecret,
		ValidatingConfiguration: opts.FencingConfiguration,
		MutatingConfiguration:   opts.PodConfiguration,
		MaxRequestBytes:         opts.MaxRequestBytes,
		ConfigureValidating:     configureValidating(opts),
	})
	if err != nil {
		return nil, err
	}
	if err := ep.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the webhook endpoint: %w", err)
	}
	return ep, nil
}

// webhookRegistrars are the admission webhooks of the operator, each adding
// its handler to the endpoint.
var webhookRegistrars = []func(ctrl.Manager, *endpoint.Endpoint, WebhookOptions) error{
	func(mgr ctrl.Manager, ep *endpoint.Endpoint, _ WebhookOptions) error { return podinject.Add(mgr, ep) },
	func(mgr ctrl.Manager, ep *endpoint.Endpoint, o WebhookOptions) error {
		var cache client.Reader
		if o.WrapCache != nil {
			if _, err := mgr.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedLease{}); err != nil {
				return fmt.Errorf("get FencedLease informer for the fencing webhook: %w", err)
			}
			if _, err := mgr.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedShardSet{}); err != nil {
				return fmt.Errorf("get FencedShardSet informer for the fencing webhook: %w", err)
			}
			cache = o.WrapCache(mgr.GetClient())
		}
		resources, err := coverage.NewResources(mgr, o.FencingConfiguration)
		if err != nil {
			return err
		}
		if err := mgr.Add(&coverage.Unknown{Resources: resources, Mapper: mgr.GetRESTMapper(), Reader: mgr.GetAPIReader(),
			Recorder: mgr.GetEventRecorder(Name), Interval: time.Minute}); err != nil {
			return fmt.Errorf("add the check of the fencing webhook's resources: %w", err)
		}
		guard, err := addScaleGuard(mgr, o, resources)
		if err != nil {
			return err
		}
		return protected.Add(mgr, protected.Options{OperatorUsers: o.OperatorUsers, BreakGlassUsers: o.BreakGlassUsers,
			BreakGlassGroups: o.BreakGlassGroups, Endpoint: ep, Cache: cache, Resources: resources, ScaleGuard: guard})
	},
}

// configureValidating gives the scale webhook the guard's matchCondition.
func configureValidating(o WebhookOptions) func(*admissionregistrationv1.ValidatingWebhookConfiguration) bool {
	if o.ScaleGuard == nil {
		return nil
	}
	g := *o.ScaleGuard
	return func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
		return g.Configure(cfg, ScaleWebhook)
	}
}

// addScaleGuard adds the guard's keeper (for the fencing webhook) and its
// resync (on the leader) to the manager; nil, nil without a guard.
func addScaleGuard(mgr ctrl.Manager, o WebhookOptions, resources *coverage.Resources) (protected.ScaleGuard, error) {
	if o.ScaleGuard == nil {
		return nil, nil
	}
	keeper, err := scaleguard.NewKeeper(mgr, *o.ScaleGuard)
	if err != nil {
		return nil, err
	}
	resync := &scaleguard.Resync{Guard: *o.ScaleGuard, Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(),
		Interval: o.ScaleGuardResync, Scaled: func(ctx context.Context) []schema.GroupResource { return scaled(resources.Listed(ctx)) }}
	if err := mgr.Add(resync); err != nil {
		return nil, fmt.Errorf("add the resync of the scale guard: %w", err)
	}
	return keeper, nil
}

// scaled are the resources whose scale writes listed sends.
func scaled(listed []coverage.Resource) []schema.GroupResource {
	var out []schema.GroupResource
	for _, r := range listed {
		if r.SubResource == "scale" && r.Group != "*" && r.Resource != "*" {
			out = append(out, schema.GroupResource{Group: r.Group, Resource: r.Resource})
		}
	}
	return out
}

// AddWebhooks registers every admission webhook with the manager's webhook
// server, under the path token, and writes the token into the paths of the
// webhook configurations before it returns, so that the API server calls
// them there as soon as the server is up. It refuses, before anything, a
// fencing webhook configuration that lists a resource it cannot protect
// (coverage.CheckConfiguration).
func AddWebhooks(ctx context.Context, mgr ctrl.Manager, opts WebhookOptions) error {
	opts = opts.withDefaults()
	// A configuration that lists what cannot be protected is refused before
	// anything is served: better no operator than a promise not kept.
	if err := coverage.CheckConfiguration(ctx, mgr.GetAPIReader(), mgr.GetRESTMapper(), opts.FencingConfiguration); err != nil {
		return err
	}
	ep, err := WebhookEndpoint(ctx, mgr, opts)
	if err != nil {
		return err
	}
	for _, add := range webhookRegistrars {
		if err := add(mgr, ep, opts); err != nil {
			return err
		}
	}
	if err := ep.Publish(ctx, mgr.GetAPIReader(), mgr.GetClient()); err != nil {
		return fmt.Errorf("publish the webhook path token: %w", err)
	}
	return nil
}

// Protection returns what tells the FencedLease controller whether the
// fencing webhook covers a namespace (Options.Protection).
func Protection(mgr ctrl.Manager, opts WebhookOptions) (fencedlease.ProtectionChecker, error) {
	opts = opts.withDefaults()
	return coverage.New(mgr, coverage.Options{Configuration: opts.FencingConfiguration, Webhook: FencingWebhook})
}
