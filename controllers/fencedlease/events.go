package fencedlease

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

const (
	eventNormal  = corev1.EventTypeNormal
	eventWarning = corev1.EventTypeWarning
)

// event logs a user-visible transition and records it as an Event on the
// FencedLease, so that both tell the same story.
func (r *Reconciler) event(ctx context.Context, fl *fencingv1alpha1.FencedLease, eventType, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	log := ctrl.LoggerFrom(ctx)
	if eventType == eventWarning {
		log.Info(msg, "reason", reason, "type", eventType)
	} else {
		log.Info(msg, "reason", reason)
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(fl, nil, eventType, reason, reason, "%s", msg)
	}
}
