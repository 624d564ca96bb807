package protected

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fencing"
)

// report logs a decision and records the Events it calls for: a
// BreakGlassWrite Event for a break-glass write, a StaleWriteRejected Event
// for a stale or impostor holder pod (see fencing.Decision), on the object
// that grants p (grantor: the FencedLease, or the FencedShardSet of a
// shard; nil when the grant was not read or there is none). Neither comes
// from a dry run or from a caller that is not a pod (other than
// break-glass), and only requests that came through the guarded endpoint
// get here. Only metadata is ever logged.
//
// The events API folds Events with the same regarding and related objects,
// reason and action into one series (first note, then a count). A rejected
// CREATE names no related object (there is none yet), so the names a pod
// tries cannot add Events, or entries to the recorder's cache, beyond one
// series per FencedLease (or FencedShardSet) and operation; UPDATE and
// DELETE name objects that exist.
func (h *Handler) report(ctx context.Context, r fencing.Request, d fencing.Decision, p fencing.Protector, grantor client.Object) {
	log := ctrl.LoggerFrom(ctx).WithValues("kind", r.Kind, "operation", r.Operation)
	log = log.WithValues(protectorValues(r.Namespace, p)...).WithValues("reason", d.Reason, "dryRun", r.DryRun)
	if r.Caller.IsPod() {
		log = log.WithValues("podName", r.Caller.PodName, "podUID", r.Caller.PodUID)
	}
	switch {
	case d.Audit:
		log.Info("Break-glass write admitted without a fence", "user", r.Caller.Username, "groups", r.Caller.Groups)
		h.Recorder.Eventf(regarding(grantor, r.Namespace, p), related(r), corev1.EventTypeWarning, fencingv1alpha1.EventBreakGlass, action("Admit", r),
			"Break-glass %s of %s %s/%s%s by user %s, without a fence", r.Operation, r.Kind, r.Namespace, r.Name, ofShard(p), r.Caller.Username)
	case !d.Allowed:
		log.V(1).Info("Write rejected", "fence", d.Fence, "message", d.Message)
		if d.StaleWrite && grantor != nil {
			h.Recorder.Eventf(grantor, related(r), corev1.EventTypeWarning, fencingv1alpha1.EventStaleWriteRejected, action("Reject", r), "%s", d.Message)
		}
	default:
		log.V(4).Info("Write admitted", "fence", d.Fence)
	}
}

// protectorValues are the log values that name the protector: the
// FencedLease, or the FencedShardSet and the shard's key.
func protectorValues(namespace string, p fencing.Protector) []any {
	if p.Sharded {
		return []any{"fencedShardSet", klog.KRef(namespace, p.Name), "shard", p.Shard}
	}
	return []any{"fencedLease", klog.KRef(namespace, p.Name)}
}

// ofShard names the shard in the note of an Event on its FencedShardSet:
// ` (shard "7")`; nothing for a FencedLease.
func ofShard(p fencing.Protector) string {
	if !p.Sharded {
		return ""
	}
	return fmt.Sprintf(" (shard %q)", p.Shard)
}

// regarding is the object an Event is about: grantor, or a reference by
// name to the FencedLease or FencedShardSet that grants p when grantor is
// nil (a break-glass repair decides without reading it, and may come after
// it is gone).
func regarding(grantor client.Object, namespace string, p fencing.Protector) runtime.Object {
	if grantor != nil {
		return grantor
	}
	meta := metav1.ObjectMeta{Namespace: namespace, Name: p.Name}
	if p.Sharded {
		return &fencingv1alpha1.FencedShardSet{ObjectMeta: meta}
	}
	return &fencingv1alpha1.FencedLease{ObjectMeta: meta}
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
