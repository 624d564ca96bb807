package coverage

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// The fencing webhook's configuration is read by name (RBAC resourceNames,
// matched by the metadata.name field selector of list and watch), namespaces
// as metadata only (their labels).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch,resourceNames=fencing
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Options name the fencing webhook.
type Options struct {
	// Configuration is the name of its ValidatingWebhookConfiguration.
	Configuration string
	// Webhook is the name of the webhook in it.
	Webhook string
}

// Checker answers Check for the configuration installed and the labels of
// a namespace, from a cache of its own that the manager starts (on every
// replica, and before any controller).
type Checker struct {
	opts  Options
	cache cache.Cache
}

// New creates a Checker and adds its cache to the manager.
func New(mgr ctrl.Manager, o Options) (*Checker, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: fields.OneTermEqualSelector("metadata.name", o.Configuration)},
			namespaceMeta(): {},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the cache of the fencing webhook's coverage: %w", err)
	}
	for _, obj := range []client.Object{&admissionregistrationv1.ValidatingWebhookConfiguration{}, namespaceMeta()} {
		if _, err := c.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return nil, fmt.Errorf("register the informers of the fencing webhook's coverage: %w", err)
		}
	}
	if err := mgr.Add(withCache{c}); err != nil {
		return nil, fmt.Errorf("add the cache of the fencing webhook's coverage: %w", err)
	}
	return &Checker{opts: o, cache: c}, nil
}

// withCache makes the manager treat the cache as one: started first, on
// every replica, and synced before controllers start.
type withCache struct{ cache.Cache }

func (w withCache) GetCache() cache.Cache { return w.Cache }

func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// Unprotected says why writes to protected objects in the namespace are not
// checked by the fencing webhook; "" when they are. It reads only from its
// synced cache and never blocks a reconcile on the API server.
func (c *Checker) Unprotected(ctx context.Context, namespace string) string {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	switch err := c.cache.Get(ctx, types.NamespacedName{Name: c.opts.Configuration}, cfg); {
	case apierrors.IsNotFound(err):
		cfg = nil
	case err != nil:
		return fmt.Sprintf("cannot tell whether writes to protected ConfigMaps and Secrets in namespace %s are checked: %v", namespace, err)
	}
	// Until the cache has seen a new namespace, its name label is all the
	// API server matches on that it is sure to have.
	nsLabels := map[string]string{corev1.LabelMetadataName: namespace}
	ns := namespaceMeta()
	switch err := c.cache.Get(ctx, types.NamespacedName{Name: namespace}, ns); {
	case err == nil:
		nsLabels = ns.Labels
	case !apierrors.IsNotFound(err):
		return fmt.Sprintf("cannot tell whether writes to protected ConfigMaps and Secrets in namespace %s are checked: %v", namespace, err)
	}
	return Check(cfg, c.opts.Configuration, c.opts.Webhook, namespace, nsLabels)
}

// Sources trigger a reconcile of the FencedLeases whose answer may have
// changed: all of them when the configuration changes (or comes or goes),
// those of a namespace when its labels change. fls reads FencedLeases (the
// manager's cache).
func (c *Checker) Sources(fls client.Reader) []source.Source {
	// All FencedLeases the cache holds, filtered here: a cache restricted to
	// some namespaces cannot list another one.
	enqueue := func(ctx context.Context, namespace string) []reconcile.Request {
		var list fencingv1alpha1.FencedLeaseList
		if err := fls.List(ctx, &list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot list the FencedLeases whose protection may have changed", "namespace", namespace)
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			if namespace == "" || list.Items[i].Namespace == namespace {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
	return []source.Source{
		source.Kind(c.cache, &admissionregistrationv1.ValidatingWebhookConfiguration{},
			handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *admissionregistrationv1.ValidatingWebhookConfiguration) []reconcile.Request {
				return enqueue(ctx, "")
			})),
		source.Kind(c.cache, namespaceMeta(),
			handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, ns *metav1.PartialObjectMetadata) []reconcile.Request {
				return enqueue(ctx, ns.Name)
			}),
			predicate.TypedLabelChangedPredicate[*metav1.PartialObjectMetadata]{}),
	}
}
