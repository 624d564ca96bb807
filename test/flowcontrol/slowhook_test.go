//go:build apf

package flowcontrol_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// slowPolicy is an admission webhook of the busy namespace that takes its
// time, as a policy engine under load does: a common way for one
// namespace's requests to hold an API server's seats long. It answers every ConfigMap update of
// that namespace with "allowed" after delay. A request holds its seat
// while the API server waits for it, with next to no CPU, so the load fills
// workload-low's seats without taking the machine's two cores from the
// operator: what the phases then measure is who waits for a seat.
type slowPolicy struct {
	srv   *httptest.Server
	delay time.Duration
}

// startSlowPolicy serves the webhook over TLS on 127.0.0.1 and registers it
// for the namespace's ConfigMap updates (failurePolicy Ignore: it only
// slows).
func startSlowPolicy(ctx context.Context, c client.Client, ns string, delay time.Duration) (*slowPolicy, error) {
	p := &slowPolicy{delay: delay}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.review))
	p.srv.StartTLS()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	url := p.srv.URL + "/validate"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "busy-namespace-policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "policy.busy.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	if err := c.Create(ctx, cfg); err != nil {
		p.srv.Close()
		return nil, fmt.Errorf("register the busy namespace's policy webhook: %w", err)
	}
	return p, nil
}

func (p *slowPolicy) review(w http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	select {
	case <-time.After(p.delay):
	case <-r.Context().Done():
		return
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func (p *slowPolicy) close() { p.srv.Close() }
