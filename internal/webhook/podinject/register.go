package podinject

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
)

// Path is where the webhook server serves the pod webhook, under the path
// token of the endpoint (Path/<token>); config/webhook/pods.yaml calls Path,
// and the endpoint adds the token.
const Path = "/mutate-fencedlease-pod"

// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=fencing.fencedlease.io,resources=fencedshardsets,verbs=get;list;watch

// Add registers the pod webhook with the manager's webhook server, under the
// endpoint's secret path. It also
// registers the FencedLease informer up front, so that the manager waits for
// it to sync before serving and the first pod does not pay for it within the
// webhook's timeout.
func Add(mgr ctrl.Manager, ep *endpoint.Endpoint) error {
	if _, err := mgr.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedLease{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("register FencedLease informer for the pod webhook: %w", err)
	}
	h := &Handler{
		Reader:     mgr.GetCache(),
		LiveReader: mgr.GetAPIReader(),
		Decoder:    admission.NewDecoder(mgr.GetScheme()),
	}
	ep.Register(mgr.GetWebhookServer(), Path, &webhook.Admission{Handler: h})
	return nil
}
