package coverage

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator reads APIServices to tell resources served by an aggregated
// API server, whose writes the fencing webhook may never see.
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=list

// Served is what the API server says of a listed resource.
type Served struct {
	// Known is false when the API server does not serve the resource (a
	// CustomResourceDefinition not installed yet): reported by Unknown, not
	// refused.
	Known bool
	// Namespaced is the resource's scope, when Known.
	Namespaced bool
	// Aggregated says that an APIService with a service serves the group:
	// another API server, which calls admission webhooks only if it chooses to.
	Aggregated bool
}

// Unhonourable says why the fencing webhook cannot protect the objects of a
// listed resource whatever it decides, "" when it can: a wildcard (it would
// send pods and leases, and resources of every scope); pods or leases, which
// it never intercepts (design.md, "Enforcement": the operator's own records and the
// holders themselves); a cluster-scoped resource (the protected-by label
// names a FencedLease of the object's namespace, and such an object has
// none); a resource served by an aggregated API server (its admission is its
// own: the webhook may never see a write).
func Unhonourable(r Resource, s Served) string {
	switch {
	case r.Group == "*" || r.Resource == "*":
		return "a wildcard: list each resource by name"
	case r.Group == "" && r.Resource == "pods":
		return "pods are never sent to the fencing webhook: a pod is a holder, not a protected object"
	case r.Group == "coordination.k8s.io" && r.Resource == "leases":
		return "leases are never sent to the fencing webhook: the operator's records are Leases"
	case s.Aggregated:
		return "it is served by an aggregated API server (an APIService with a service), which need not call admission webhooks"
	case s.Known && !s.Namespaced:
		return "it is cluster-scoped: the protected-by label names a FencedLease in the object's namespace, and its objects have none"
	}
	return ""
}

// Refusals are the resources a configuration lists that cannot be honoured
// (Unhonourable), each as "resource: why", sorted; nil when there are none.
// mapper gives their scope; aggregated lists the groups served by an
// aggregated API server. A resource the API server does not serve is not
// refused (Unknown reports it).
func Refusals(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, mapper meta.RESTMapper, aggregated []string) ([]string, error) {
	var out []string
	seen := map[Resource]bool{}
	for _, r := range Listed(cfg) {
		r.SubResource = ""
		if seen[r] {
			continue
		}
		seen[r] = true
		s := Served{Aggregated: slices.Contains(aggregated, r.Group)}
		if r.Group != "*" && r.Resource != "*" && !s.Aggregated {
			m, err := restMapping(mapper, r)
			switch {
			case err == nil:
				s.Known, s.Namespaced = true, m.Scope.Name() == meta.RESTScopeNameNamespace
			case meta.IsNoMatchError(err):
			default:
				return nil, fmt.Errorf("the scope of resource %s: %w", r, err)
			}
		}
		if why := Unhonourable(r, s); why != "" {
			out = append(out, r.String()+": "+why)
		}
	}
	return out, nil
}

// restMapping is the mapping of a resource (its scope), a NoMatch error
// when the API server does not serve it.
func restMapping(mapper meta.RESTMapper, r Resource) (*meta.RESTMapping, error) {
	gvk, err := mapper.KindFor(schema.GroupVersionResource{Group: r.Group, Resource: r.Resource})
	if err != nil {
		return nil, err
	}
	return mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}

// AggregatedGroups lists the API groups that an APIService with a service
// serves (an aggregated API server).
func AggregatedGroups(ctx context.Context, c client.Reader) ([]string, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIServiceList"})
	if err := c.List(ctx, l); err != nil {
		return nil, fmt.Errorf("list APIServices: %w", err)
	}
	var out []string
	for _, s := range l.Items {
		if svc, _, _ := unstructured.NestedMap(s.Object, "spec", "service"); svc == nil {
			continue
		}
		if g, _, _ := unstructured.NestedString(s.Object, "spec", "group"); !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out, nil
}

// CheckConfiguration refuses, with an error that names each resource and
// why, a fencing webhook configuration (named name) that lists a resource
// it cannot protect; nil when it is not installed (the defaults apply).
func CheckConfiguration(ctx context.Context, c client.Reader, mapper meta.RESTMapper, name string) error {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read the fencing webhook's configuration %s: %w", name, err)
	}
	aggregated, err := AggregatedGroups(ctx, c)
	if err != nil {
		return err
	}
	refused, err := Refusals(cfg, mapper, aggregated)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		return fmt.Errorf("ValidatingWebhookConfiguration %s lists resources whose objects the fencing webhook cannot protect (remove them from webhooks.protectedResources): %s",
			name, strings.Join(refused, "; "))
	}
	return nil
}
