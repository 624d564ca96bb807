package coverage

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Resource is a resource, or a subresource of one, that the fencing
// webhook's configuration sends writes of.
type Resource struct {
	Group, Resource, SubResource string
}

// String is resource[.group][/subresource], as in a webhook rule.
func (r Resource) String() string {
	s := r.Resource
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.SubResource != "" {
		s += "/" + r.SubResource
	}
	return s
}

// DefaultResources are what the fencing webhook protects when nothing says
// otherwise: ConfigMaps and Secrets.
var DefaultResources = []Resource{{Resource: "configmaps"}, {Resource: "secrets"}}

// Resources are the resources the fencing webhook's configuration, as
// installed, sends writes of (in any of its webhooks): the writes the
// fencing webhook decides. The configuration is the one place they are
// configured (the chart and config/webhook render it); the webhook reads it
// from a cache of its own that holds that one object.
type Resources struct {
	configuration string
	cache         cache.Cache
}

// NewResources creates Resources for the configuration of that name and adds
// its cache to the manager.
func NewResources(mgr ctrl.Manager, configuration string) (*Resources, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: fields.OneTermEqualSelector("metadata.name", configuration)},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the cache of the fencing webhook's resources: %w", err)
	}
	if _, err := c.GetInformer(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{}, cache.BlockUntilSynced(false)); err != nil {
		return nil, fmt.Errorf("register the informer of the fencing webhook's resources: %w", err)
	}
	if err := mgr.Add(withCache{c}); err != nil {
		return nil, fmt.Errorf("add the cache of the fencing webhook's resources: %w", err)
	}
	return &Resources{configuration: configuration, cache: c}, nil
}

// Listed returns the resources the configuration lists, sorted; the
// defaults when it is not installed or cannot be read.
func (r *Resources) Listed(ctx context.Context) []Resource {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.cache.Get(ctx, types.NamespacedName{Name: r.configuration}, cfg); err != nil {
		if !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot read the fencing webhook's configuration", "configuration", r.configuration)
		}
		return DefaultResources
	}
	return Listed(cfg)
}

// Listed returns the resources (and subresources) that the rules of a
// configuration's webhooks send writes of, sorted. A wildcard stays one.
func Listed(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []Resource {
	var out []Resource
	for _, w := range cfg.Webhooks {
		for _, rule := range w.Rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					name, sub, _ := strings.Cut(res, "/")
					if r := (Resource{Group: g, Resource: name, SubResource: sub}); !slices.Contains(out, r) {
						out = append(out, r)
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Covers says whether a write of a resource (subresource "" for the object
// itself) is among those listed.
func Covers(listed []Resource, group, resource, subResource string) bool {
	for _, r := range listed {
		if (r.Group == group || r.Group == "*") && (r.Resource == resource || r.Resource == "*") &&
			(r.SubResource == subResource || r.SubResource == "*" && subResource != "") {
			return true
		}
	}
	return false
}
