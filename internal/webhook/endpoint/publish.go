package endpoint

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// The operator reads and updates its own two webhook configurations, by name
// (list and watch carry a metadata.name field selector, which RBAC matches
// against resourceNames), and no other. The names are config/webhook's; both
// installs rewrite them with the names they give the objects.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=fencing
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=pod-injector

// TokenPath returns the path that a webhook whose clientConfig has path p
// must call: base/token when p is one of bases, with or without a token
// (an earlier one, or the same), after cleaning (envtest writes
// "https://host:port//path"). ok is false when p is none of them: that
// webhook is served by someone else and is left alone.
func TokenPath(p string, bases []string, token string) (string, bool) {
	p = path.Clean("/" + p)
	for _, base := range bases {
		if p == base || strings.HasPrefix(p, base+"/") && !strings.Contains(p[len(base)+1:], "/") {
			return base + "/" + token, true
		}
	}
	return "", false
}

// withToken points a clientConfig at base/token, whether it names a service
// (service.path) or a URL (the path of url). It reports whether it changed.
func withToken(cc *admissionregistrationv1.WebhookClientConfig, bases []string, token string) (bool, error) {
	switch {
	case cc.Service != nil:
		p, ok := TokenPath(ptr.Deref(cc.Service.Path, "/"), bases, token)
		if !ok || p == ptr.Deref(cc.Service.Path, "") {
			return false, nil
		}
		cc.Service.Path = &p
		return true, nil
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return false, fmt.Errorf("clientConfig.url: %w", err)
		}
		p, ok := TokenPath(u.Path, bases, token)
		if !ok || p == u.Path {
			return false, nil
		}
		u.Path, u.RawPath = p, ""
		cc.URL = ptr.To(u.String())
		return true, nil
	}
	return false, nil
}

// Publish writes the token into the paths of the webhook configurations:
// every webhook of theirs that calls a registered path calls base/token from
// then on. A configuration that is not installed is skipped (the controller
// of SetupWithManager publishes it once it is). r may be a cache; the write
// is a compare-and-swap on what was read, retried on conflict.
func (e *Endpoint) Publish(ctx context.Context, r client.Reader, w client.Writer) error {
	bases := e.registered()
	if name := e.opts.ValidatingConfiguration; name != "" {
		err := publish(ctx, r, w, &admissionregistrationv1.ValidatingWebhookConfiguration{}, "ValidatingWebhookConfiguration", name, func(o *admissionregistrationv1.ValidatingWebhookConfiguration) (bool, error) {
			changed := false
			for i := range o.Webhooks {
				c, err := withToken(&o.Webhooks[i].ClientConfig, bases, e.token)
				if err != nil {
					return false, fmt.Errorf("webhook %s: %w", o.Webhooks[i].Name, err)
				}
				changed = changed || c
			}
			if e.opts.ConfigureValidating != nil && e.opts.ConfigureValidating(o) {
				changed = true
			}
			return changed, nil
		})
		if err != nil {
			return err
		}
	}
	if name := e.opts.MutatingConfiguration; name != "" {
		return publish(ctx, r, w, &admissionregistrationv1.MutatingWebhookConfiguration{}, "MutatingWebhookConfiguration", name, func(o *admissionregistrationv1.MutatingWebhookConfiguration) (bool, error) {
			changed := false
			for i := range o.Webhooks {
				c, err := withToken(&o.Webhooks[i].ClientConfig, bases, e.token)
				if err != nil {
					return false, fmt.Errorf("webhook %s: %w", o.Webhooks[i].Name, err)
				}
				changed = changed || c
			}
			return changed, nil
		})
	}
	return nil
}

func publish[T client.Object](ctx context.Context, r client.Reader, w client.Writer, obj T, kind, name string, mutate func(T) (bool, error)) error {
	log := ctrl.LoggerFrom(ctx).WithValues(kind, name)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				log.V(1).Info("Webhook configuration not installed, nothing to publish")
				return nil
			}
			return fmt.Errorf("get %s %s: %w", kind, name, err)
		}
		changed, err := mutate(obj)
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
		if !changed {
			return nil
		}
		if err := w.Update(ctx, obj); err != nil {
			return fmt.Errorf("update the webhook paths of %s %s: %w", kind, name, err)
		}
		log.Info("Published the webhook configuration (path token, scale guard)")
		return nil
	})
}

// withCache makes the manager treat the cache as one: started first, on
// every replica (not only on the leader), and synced before controllers start.
type withCache struct{ cache.Cache }

func (w withCache) GetCache() cache.Cache { return w.Cache }

// SetupWithManager keeps the paths published: it watches the two
// configurations (by name, in a cache of its own that holds nothing else)
// and publishes again whenever they change, for instance when an install
// tool puts the bare path back. Every replica does it (no leader election):
// they all serve the same token, so their writes agree.
func (e *Endpoint) SetupWithManager(mgr ctrl.Manager) error {
	byName := func(name string) cache.ByObject {
		return cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", name)}
	}
	opts := cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), ByObject: map[client.Object]cache.ByObject{}}
	var sources []source.Source
	if name := e.opts.ValidatingConfiguration; name != "" {
		opts.ByObject[&admissionregistrationv1.ValidatingWebhookConfiguration{}] = byName(name)
	}
	if name := e.opts.MutatingConfiguration; name != "" {
		opts.ByObject[&admissionregistrationv1.MutatingWebhookConfiguration{}] = byName(name)
	}
	if len(opts.ByObject) == 0 {
		return nil
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return fmt.Errorf("create the cache of the webhook configurations: %w", err)
	}
	if err := mgr.Add(withCache{c}); err != nil {
		return fmt.Errorf("add the cache of the webhook configurations: %w", err)
	}
	if e.opts.ValidatingConfiguration != "" {
		sources = append(sources, source.Kind(c, &admissionregistrationv1.ValidatingWebhookConfiguration{},
			&handler.TypedEnqueueRequestForObject[*admissionregistrationv1.ValidatingWebhookConfiguration]{}))
	}
	if e.opts.MutatingConfiguration != "" {
		sources = append(sources, source.Kind(c, &admissionregistrationv1.MutatingWebhookConfiguration{},
			&handler.TypedEnqueueRequestForObject[*admissionregistrationv1.MutatingWebhookConfiguration]{}))
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("webhook-endpoint").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1})
	for _, s := range sources {
		b = b.WatchesRawSource(s)
	}
	w := mgr.GetClient()
	return b.Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, e.Publish(ctx, c, w)
	}))
}
