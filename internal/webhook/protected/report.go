package protected

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// report logs a decision and records the Events it calls for: a
// BreakGlassWrite Event for a break-glass write, a StaleWriteRejected Event
// for a stale or impostor holder pod (see fencing.Decision). Neither comes from
// a dry run or from a caller that is not a pod (other than break-glass), and
// only requests that came through the guarded endpoint get here. Only
// metadata is ever logged.
//
// The events API folds Events with the same regarding and related objects,
// reason and action into one series (first note, then a count). A rejected
// CREATE names no related object (there is none yet), so the names a pod
// tries cannot add Events, or entries to the recorder's cache, beyond one
// series per FencedLease and operation; UPDATE and DELETE name objects that
// exist.
func (h *Handler) report(ctx context.Context, r fencing.Request, d fencing.Decision, fl *fencingv1alpha1.FencedLease) {
	log := ctrl.LoggerFrom(ctx).WithValues("kind", r.Kind, "operation", r.Operation,
		"fencedLease", klog.KRef(r.Namespace, d.Lease), "reason", d.Reason, "dryRun", r.DryRun)
	if r.Caller.IsPod() {
		log = log.WithValues("podName", r.Caller.PodName, "podUID", r.Caller.PodUID)
	}
	switch {
	case d.Audit:
		log.Info("Break-glass write admitted without a fence", "user", r.Caller.Username, "groups", r.Caller.Groups)
		h.Recorder.Eventf(regarding(fl, r.Namespace, d.Lease), related(r), corev1.EventTypeWarning, fencingv1alpha1.EventBreakGlass, action("Admit", r),
			"Break-glass %s of %s %s/%s by user %s, without a fence", r.Operation, r.Kind, r.Namespace, r.Name, r.Caller.Username)
	case !d.Allowed:
		log.V(1).Info("Write rejected", "fence", d.Fence, "message", d.Message)
		if d.StaleWrite && fl != nil {
			h.Recorder.Eventf(fl, related(r), corev1.EventTypeWarning, fencingv1alpha1.EventStaleWriteRejected, action("Reject", r), "%s", d.Message)
		}
	default:
		log.V(4).Info("Write admitted", "fence", d.Fence)
	}
}

// regarding is the FencedLease an Event is about; a reference by name when
// it does not exist (a break-glass repair may come after it is gone).
func regarding(fl *fencingv1alpha1.FencedLease, namespace, name string) *fencingv1alpha1.FencedLease {
	if fl != nil {
		return fl
	}
	return &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

// related is the protected object an Event is about, by name; none for a
// CREATE.
func related(r fencing.Request) runtime.Object {
	if r.Operation == fencing.Create {
		return nil
	}
	meta := metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}
	switch r.Kind {
	case "ConfigMap":
		return &corev1.ConfigMap{ObjectMeta: meta}
	case "Secret":
		return &corev1.Secret{ObjectMeta: meta}
	}
	return nil
}

// action is the Event's action: "RejectUpdate", "AdmitDelete"...
func action(verb string, r fencing.Request) string {
	op := string(r.Operation)
	if op == "" {
		return verb
	}
	return verb + op[:1] + strings.ToLower(op[1:])
}
