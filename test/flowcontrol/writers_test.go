//go:build apf

package flowcontrol_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// holderWrites are the outcomes of the holder pods' writes to their
// protected ConfigMaps: each one reaches the fencing webhook, which reads
// the FencedLease's Lease from the API server as the operator.
type holderWrites struct {
	mu sync.Mutex
	// Admitted, Denied (the webhook's answer: a stale or wrong fence) and
	// WebhookFailed (the API server could not get an answer from the
	// webhook in time; failurePolicy Fail rejects the write) count writes;
	// Other counts any other error. NotHolder counts the writes a holder
	// did not make because its pod had no fence (its grant revoked).
	Admitted, Denied, WebhookFailed, Other, NotHolder int
	took                                              []time.Duration
	errors                                            []string
}

func (w *holderWrites) add(took time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		w.Admitted++
		w.took = append(w.took, took)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied the request"):
		w.Denied++
	case strings.Contains(err.Error(), "failed calling webhook"):
		w.WebhookFailed++
	default:
		w.Other++
	}
	if err != nil && len(w.errors) < 10 {
		w.errors = append(w.errors, err.Error())
	}
}

// writerRole lets the candidate pods' service account write ConfigMaps:
// RBAC allows it, only the fencing webhook stands in the way.
func writerRole(ns string) (*rbacv1.Role, *rbacv1.RoleBinding) {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}}}
}

// holderWriter is a holder pod that writes its FencedLease's protected
// ConfigMap with its own bound token and its current fence, which it reads
// from its pod's annotations (a stand-in for its token file).
type holderWriter struct {
	pod   *corev1.Pod
	lease string
	as    client.Client
}

// create creates the protected ConfigMap, as the holder, with its fence.
func (h *holderWriter) create(ctx context.Context, admin client.Client) error {
	fence, err := h.fence(ctx, admin)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.pod.Namespace, Name: h.configMap(),
		Labels:      map[string]string{fencingv1alpha1.LabelProtectedBy: h.lease},
		Annotations: map[string]string{fencingv1alpha1.AnnotationFence: fence}}, Data: map[string]string{"seq": "0"}}
	if err := h.as.Create(ctx, cm); err != nil {
		return fmt.Errorf("create protected ConfigMap %s/%s as the holder: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

func (h *holderWriter) configMap() string { return "state-" + h.lease }

// fence is the fence published to the pod.
func (h *holderWriter) fence(ctx context.Context, admin client.Client) (string, error) {
	pod := &corev1.Pod{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(h.pod), pod); err != nil {
		return "", fmt.Errorf("get pod %s/%s: %w", h.pod.Namespace, h.pod.Name, err)
	}
	return pod.Annotations[fencingv1alpha1.AnnotationFence], nil
}

// run writes every interval until ctx ends.
func (h *holderWriter) run(ctx context.Context, admin client.Client, interval time.Duration, out *holderWrites) {
	for n := 1; ctx.Err() == nil; n++ {
		fence, err := h.fence(ctx, admin)
		if err == nil && fence == "" {
			// Not the holder (for now): a workload does not write then.
			out.mu.Lock()
			out.NotHolder++
			out.mu.Unlock()
		} else if err == nil {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"data":{"seq":%q}}`, fencingv1alpha1.AnnotationFence, fence, strconv.Itoa(n))
			start := time.Now()
			err = h.as.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.pod.Namespace, Name: h.configMap()}},
				client.RawPatch(types.MergePatchType, patch))
			if ctx.Err() != nil {
				return
			}
			out.add(time.Since(start), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// summary is what a phase records of the holders' writes.
func (w *holderWrites) summary() holderSummary {
	w.mu.Lock()
	defer w.mu.Unlock()
	took := slices.Clone(w.took)
	slices.Sort(took)
	return holderSummary{Admitted: w.Admitted, Denied: w.Denied, WebhookFailed: w.WebhookFailed, Other: w.Other, NotHolder: w.NotHolder,
		P50Ms: ms(quantile(took, 0.5)), P99Ms: ms(quantile(took, 0.99)), MaxMs: ms(quantile(took, 1)), Errors: slices.Clone(w.errors)}
}
