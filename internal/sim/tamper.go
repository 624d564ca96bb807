package sim

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/policy"
	"github.com/fencedlease/fencedlease/internal/record"
)

// editor is a user with the built-in edit role in the namespace: RBAC lets
// it patch pods and Leases and, often, custom resources and their status.
const editor = "erin"

// editorTampers has a namespace editor write operator-owned state, through
// the admission policy: publish a fence to a standby, hand the Lease to
// another pod, or move the FencedLease's status to another grant. The
// policy must refuse every one: any that went through would break the
// lock's invariants, and the checker would say so.
func (w *world) editorTampers() (bool, error) {
	var req policy.Request
	var obj client.Object
	var status bool
	switch w.sim.rng.Intn(3) {
	case 0:
		pod := w.pickPod()
		if pod == nil {
			return false, nil
		}
		next := pod.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		record.Pod{Lease: "db", Role: record.RoleHolder, Fence: w.sim.store.rev + 1000}.Apply(next.Annotations)
		req, obj = policy.Request{Resource: policy.Pods, Operation: policy.Update, Old: pod, New: next}, next
	case 1:
		l := &coordinationv1.Lease{}
		if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, l); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		pod := w.pickPod()
		if pod == nil {
			return false, nil
		}
		next := l.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Spec.HolderIdentity = ptr.To(pod.Name)
		next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(w.now()))
		next.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] = string(pod.UID)
		next.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStateHeld
		req, obj = policy.Request{Resource: policy.Leases, Operation: policy.Update, Old: l, New: next}, next
	default:
		fl := &fencingv1alpha1.FencedLease{}
		if err := w.c().Get(w.ctx, types.NamespacedName{Namespace: w.namespace, Name: "db"}, fl); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		pod := w.pickPod()
		if pod == nil {
			return false, nil
		}
		next := fl.DeepCopy()
		next.Status.Holder = &fencingv1alpha1.HolderRef{PodName: pod.Name, PodUID: pod.UID}
		next.Status.Fence += 1000
		req, obj, status = policy.Request{Resource: policy.FencedLeasesStatus, Operation: policy.Update, Old: fl, New: next}, next, true
	}
	req.User = editor
	w.sim.tracef("step %d: world: the namespace editor writes %s %s", w.sim.step, req.Resource, obj.GetName())
	if !policy.Allows(w.sim.principals, req) {
		w.sim.tracef("  denied by the admission policy")
		w.sim.stats.PolicyDenials++
		return true, nil
	}
	if status {
		return true, w.write(obj, w.c().Status().Update(context.Background(), obj))
	}
	return true, w.write(obj, w.c().Update(context.Background(), obj))
}
