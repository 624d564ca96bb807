package fencedlease

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
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

// transition is a change of holdership: a grant, or the end of one.
type transition struct {
	eventType, reason string
	// pod is the pod whose grant starts or ends; fence is that grant's.
	pod   string
	fence int64
	// duration is how long an ended grant lasted.
	duration time.Duration
	// outcome is why: the cause of an end, or what led to a grant.
	outcome string
	message string
}

// transition logs a change of holdership with its facts as keys (lease,
// holder, fence, transition, duration, outcome), and records it as an Event
// on the FencedLease. Renewals are not transitions: they are counted, never
// recorded as Events.
func (r *Reconciler) transition(ctx context.Context, fl *fencingv1alpha1.FencedLease, t transition) {
	kv := []any{"lease", klog.KObj(fl), "transition", t.reason, "holder", t.pod, "fence", t.fence, "outcome", t.outcome}
	if t.duration > 0 {
		kv = append(kv, "duration", round(t.duration).String())
	}
	if t.eventType == eventWarning {
		kv = append(kv, "type", t.eventType)
	}
	ctrl.LoggerFrom(ctx).Info(t.message, kv...)
	if r.Recorder != nil {
		r.Recorder.Eventf(fl, nil, t.eventType, t.reason, t.reason, "%s", t.message)
	}
}

// podEvent records an Event on a pod that gained or lost holdership, with
// the FencedLease as the related object: kubectl describe pod shows it.
func (r *Reconciler) podEvent(pod *corev1.Pod, fl *fencingv1alpha1.FencedLease, eventType, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pod, fl, eventType, reason, action, format, args...)
	}
}

// round keeps durations in messages readable.
func round(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
