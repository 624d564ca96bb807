package coverage

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// unknownResources counts the resources the fencing webhook's configuration
// lists that the API server does not serve.
var unknownResources = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "fencedlease_webhook_unknown_resources",
	Help: "Resources that the fencing webhook's configuration lists and the API server does not serve (a missing custom resource definition, a misspelt name): writes to them are not protected. Their names are in the operator's log and in Warning Events on the configuration.",
})

// unhonourableResources counts the resources the configuration lists that
// the fencing webhook cannot protect (Unhonourable): refused at start, and
// reported when one becomes so while the operator runs (a
// CustomResourceDefinition changed to cluster scope, an APIService added).
var unhonourableResources = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "fencedlease_webhook_unhonourable_resources",
	Help: "Resources that the fencing webhook's configuration lists and that it cannot protect (cluster-scoped, served by an aggregated API server): writes to them are not protected. Their names and why are in the operator's log and in Warning Events on the configuration.",
})

func init() { metrics.Registry.MustRegister(unknownResources, unhonourableResources) }

// EventUnhonourableResource is the reason of the Event that reports a
// resource listed that the fencing webhook cannot protect.
const EventUnhonourableResource = "UnhonourableProtectedResource"

// EventUnknownResource is the reason of the Event that reports a resource
// listed that does not exist.
const EventUnknownResource = "UnknownProtectedResource"

// Unknown reports the resources the configuration lists that the API server
// does not serve, at start and every interval: the API server sends the
// webhook no write of them, so objects of them are not protected, and a
// user who listed one must hear it rather than believe them protected. It
// logs an error and records a Warning Event on the configuration once for
// each resource that becomes unknown, and sets a gauge.
type Unknown struct {
	Resources *Resources
	Mapper    meta.RESTMapper
	Recorder  events.EventRecorder
	Interval  time.Duration
	// Reader lists APIServices (AggregatedGroups); nil checks scope only.
	Reader   client.Reader
	reported map[Resource]bool
	refused  map[string]bool
}

// NeedLeaderElection is false: every replica reports (each serves the
// webhook).
func (u *Unknown) NeedLeaderElection() bool { return false }

// Start checks until ctx ends.
func (u *Unknown) Start(ctx context.Context) error {
	u.reported = map[Resource]bool{}
	u.refused = map[string]bool{}
	t := time.NewTicker(u.Interval)
	defer t.Stop()
	for {
		u.check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (u *Unknown) check(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("fencing-resources")
	unknown := map[Resource]bool{}
	for _, r := range u.Resources.Listed(ctx) {
		// A subresource (R/*, R/status) is served when its resource is:
		// each resource is checked, and reported, once.
		r.SubResource = ""
		if r.Group == "*" || r.Resource == "*" || unknown[r] {
			continue
		}
		if _, err := u.Mapper.KindsFor(schema.GroupVersionResource{Group: r.Group, Resource: r.Resource}); err == nil {
			continue
		} else if !meta.IsNoMatchError(err) {
			log.Error(err, "Cannot tell whether a resource the fencing webhook protects exists", "resource", r.String())
			continue
		}
		unknown[r] = true
		if u.reported[r] {
			continue
		}
		msg := "resource " + r.String() + " is listed in the fencing webhook's configuration, but the API server does not serve it: objects of it are not protected (is its CustomResourceDefinition installed? is the name right?)"
		log.Error(nil, "A protected resource does not exist", "resource", r.String(), "configuration", u.Resources.configuration, "message", msg)
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: u.Resources.configuration}}
		cfg.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
		u.Recorder.Eventf(cfg, nil, corev1.EventTypeWarning, EventUnknownResource, "Check", "%s", msg)
	}
	u.reported = unknown
	unknownResources.Set(float64(len(unknown)))
	u.checkHonourable(ctx, log)
}

// checkHonourable reports, once each, the resources listed that cannot be
// protected (Refusals), and sets their gauge.
func (u *Unknown) checkHonourable(ctx context.Context, log logr.Logger) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := u.Resources.cache.Get(ctx, types.NamespacedName{Name: u.Resources.configuration}, cfg); err != nil {
		return
	}
	var aggregated []string
	if u.Reader != nil {
		var err error
		if aggregated, err = AggregatedGroups(ctx, u.Reader); err != nil {
			log.Error(err, "Cannot tell which resources an aggregated API server serves")
		}
	}
	refused, err := Refusals(cfg, u.Mapper, aggregated)
	if err != nil {
		log.Error(err, "Cannot tell whether the resources the fencing webhook protects can be protected")
		return
	}
	now := map[string]bool{}
	for _, r := range refused {
		now[r] = true
		if u.refused[r] {
			continue
		}
		msg := "the fencing webhook's configuration lists a resource whose objects it cannot protect: " + r
		log.Error(nil, "A protected resource cannot be protected", "configuration", u.Resources.configuration, "message", msg)
		obj := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: u.Resources.configuration}}
		obj.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
		u.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, EventUnhonourableResource, "Check", "%s", msg)
	}
	u.refused = now
	unhonourableResources.Set(float64(len(now)))
}
