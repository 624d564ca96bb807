package podinject

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// Handler is the pod webhook.
//
// It is a raw admission.Handler rather than a typed admission.Defaulter: the
// typed form has no way to return admission warnings (Default returns only
// an error), and the webhook must warn about a labelled pod that no
// FencedLease selects, and about one selected twice. The raw form also lets a
// conflict be a plain denial with its message, and lets the patch be computed
// against the decoded pod so that it only ever adds (see Handle).
type Handler struct {
	// Reader reads FencedLeases; the manager's cache.
	Reader client.Reader
	// LiveReader, if set, confirms with the API server that no FencedLease
	// selects a pod when Reader finds none, so that a FencedLease created a
	// moment before its pods (kubectl apply of both at once) is not missed
	// because the cache lags behind.
	LiveReader client.Reader
	// Decoder decodes pods.
	Decoder admission.Decoder
}

var _ admission.Handler = &Handler{}

// Handle admits a pod CREATE. The objectSelector of the webhook
// configuration only sends labelled pods; anything else is admitted as is.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := h.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode pod: %w", err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if pod.Labels[fencingv1alpha1.LabelInject] != "true" {
		return admission.Allowed("")
	}
	log := ctrl.LoggerFrom(ctx).WithValues("pod", klog.KObj(pod), "generateName", pod.GenerateName)

	d, err := h.decide(ctx, pod)
	if err != nil {
		log.Error(err, "Cannot decide what to inject")
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !d.Injects() {
		log.V(4).Info("No FencedLease or FencedShardSet selects the pod, admitting it unchanged")
		return admission.Allowed("").WithWarnings(d.Warnings...)
	}

	mutated := pod.DeepCopy()
	changed, err := Inject(mutated, d.ReadinessGate)
	var conflict *ConflictError
	if errors.As(err, &conflict) {
		log.Info("Denied pod: the token files cannot be mounted", "reason", err.Error())
		return admission.Denied(err.Error()).WithWarnings(d.Warnings...)
	}
	if !changed {
		return admission.Allowed("").WithWarnings(d.Warnings...)
	}
	// The patch is computed from the decoded pod, not from the raw request:
	// a field this build's Pod type does not know would otherwise show up as
	// a removal. Injection only appends, so the indices of the decoded pod
	// are those of the request.
	before, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode pod: %w", err))
	}
	after, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode injected pod: %w", err))
	}
	log.V(4).Info("Injecting token files", "fencedLeases", d.Selected, "fencedShardSets", d.Sets, "readinessGate", d.ReadinessGate)
	return admission.PatchResponseFromRaw(before, after).WithWarnings(d.Warnings...)
}

// decide lists the FencedLeases and FencedShardSets of the pod's namespace
// and decides. When the cache knows none that selects the pod, the API
// server is asked.
func (h *Handler) decide(ctx context.Context, pod *corev1.Pod) (Decision, error) {
	d, err := decideFrom(ctx, h.Reader, pod)
	if err != nil || d.Injects() || h.LiveReader == nil {
		return d, err
	}
	return decideFrom(ctx, h.LiveReader, pod)
}

func decideFrom(ctx context.Context, r client.Reader, pod *corev1.Pod) (Decision, error) {
	var fls fencingv1alpha1.FencedLeaseList
	if err := r.List(ctx, &fls, client.InNamespace(pod.Namespace)); err != nil {
		return Decision{}, fmt.Errorf("list FencedLeases in namespace %s: %w", pod.Namespace, err)
	}
	var sets fencingv1alpha1.FencedShardSetList
	if err := r.List(ctx, &sets, client.InNamespace(pod.Namespace)); err != nil {
		return Decision{}, fmt.Errorf("list FencedShardSets in namespace %s: %w", pod.Namespace, err)
	}
	return Decide(pod, fls.Items, sets.Items), nil
}
