package fencedlease

import (
	"context"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
)

func holderAnnotations(lease string, fence int64) map[string]string {
	return map[string]string{
		fencingv1alpha1.AnnotationFence: strconv.FormatInt(fence, 10),
		fencingv1alpha1.AnnotationRole:  fencingv1alpha1.RoleHolder,
		fencingv1alpha1.AnnotationLease: lease,
	}
}

func standbyAnnotations(lease string) map[string]string {
	return map[string]string{
		fencingv1alpha1.AnnotationFence: "",
		fencingv1alpha1.AnnotationRole:  fencingv1alpha1.RoleStandby,
		fencingv1alpha1.AnnotationLease: lease,
	}
}

// reconcilePods publishes the grant to the pods: every candidate but the
// holder is a standby with an empty fence, pods no longer selected lose the
// annotations, and the holder gets its fence, but only once the FencedLease
// status records it (commit before publish). Standbys are demoted before the
// holder is published.
func (r *Reconciler) reconcilePods(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.lease == nil || s.pods == nil {
		return ctrl.Result{}, nil
	}
	holderUID, fence := publishable(s)
	// The pod the Lease names as holder is left alone while its grant cannot
	// be published yet (the status as read lags behind the Lease): demoting it
	// would make it flap when another replica has already published it.
	current := types.UID("")
	if v := leaseView(s.lease); v.State == holder.StateHeld {
		current = v.HolderUID
	}
	var errs []error
	for i := range s.pods.stray {
		if err := r.publish(ctx, s.fl, &s.pods.stray[i], nil); err != nil {
			errs = append(errs, err)
		}
	}
	var holderPod *corev1.Pod
	for i := range s.pods.selected {
		pod := &s.pods.selected[i]
		if pod.UID == current {
			if pod.UID == holderUID {
				holderPod = pod
			}
			continue
		}
		if err := r.publish(ctx, s.fl, pod, standbyAnnotations(s.fl.Name)); err != nil {
			errs = append(errs, err)
		}
	}
	// Never two holders: the holder is published only once every other pod
	// is known to be a standby.
	if holderPod != nil && len(errs) == 0 {
		if err := r.publishHolder(ctx, s, holderPod, fence); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return ctrl.Result{}, fmt.Errorf("publish to pods: %v", errs)
	}
	return ctrl.Result{}, nil
}

// publishable returns the holder and fence that may be published: the Lease
// holds a committed grant, the status as read already records it, and the
// holder is still eligible (a holder that is losing its grant is never
// published again).
func publishable(s *scope) (types.UID, int64) {
	v := leaseView(s.lease)
	h := s.recorded.Holder
	if v.State != holder.StateHeld || v.Fence <= 0 || h == nil || h.PodUID != v.HolderUID || s.recorded.Fence != v.Fence {
		return "", 0
	}
	if c, ok := holder.Find(s.pods.candidates, v.HolderUID); !ok || !c.Eligible() {
		return "", 0
	}
	return v.HolderUID, v.Fence
}

// publishHolder hands the fence to the holder pod. It reads the Lease from the
// API server first, so that a stale cache can never publish a fence that is no
// longer current, and patches the pod with an optimistic lock.
func (r *Reconciler) publishHolder(ctx context.Context, s *scope, pod *corev1.Pod, fence int64) error {
	want := holderAnnotations(s.fl.Name, fence)
	if hasAnnotations(pod, want) {
		return r.setHolderCondition(ctx, pod, true)
	}
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.lease), live); err != nil {
		return fmt.Errorf("confirm Lease %s before publishing: %w", klog.KObj(s.lease), err)
	}
	if v := leaseView(live); v.State != holder.StateHeld || v.HolderUID != pod.UID || v.Fence != fence {
		return fmt.Errorf("lease %s moved on before fence %d was published to pod %s", klog.KObj(live), fence, pod.Name)
	}
	if err := r.publish(ctx, s.fl, pod, want, client.MergeFromWithOptimisticLock{}); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Published fence to holder", "pod", klog.KObj(pod), "fence", fence)
	return nil
}

// publish sets (or, with nil, removes) the annotations of a pod and the
// holder condition of its readiness gate.
func (r *Reconciler) publish(ctx context.Context, fl *fencingv1alpha1.FencedLease, pod *corev1.Pod, want map[string]string, opts ...client.MergeFromOption) error {
	if !hasAnnotations(pod, want) {
		base := pod.DeepCopy()
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		if want == nil {
			for _, k := range []string{fencingv1alpha1.AnnotationFence, fencingv1alpha1.AnnotationRole, fencingv1alpha1.AnnotationLease} {
				delete(pod.Annotations, k)
			}
		}
		for k, v := range want {
			pod.Annotations[k] = v
		}
		if err := client.IgnoreNotFound(r.Patch(ctx, pod, client.MergeFromWithOptions(base, opts...))); err != nil {
			return fmt.Errorf("annotate pod %s for FencedLease %s: %w", klog.KObj(pod), fl.Name, err)
		}
	}
	isHolder := want != nil && want[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder
	return r.setHolderCondition(ctx, pod, isHolder)
}

func hasAnnotations(pod *corev1.Pod, want map[string]string) bool {
	if want == nil {
		for _, k := range []string{fencingv1alpha1.AnnotationFence, fencingv1alpha1.AnnotationRole, fencingv1alpha1.AnnotationLease} {
			if _, ok := pod.Annotations[k]; ok {
				return false
			}
		}
		return true
	}
	for k, v := range want {
		if got, ok := pod.Annotations[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// setHolderCondition keeps the fencedlease.io/holder pod condition True on the
// holder and False elsewhere, for pods that carry the readiness gate, so that
// only the holder is Ready.
func (r *Reconciler) setHolderCondition(ctx context.Context, pod *corev1.Pod, isHolder bool) error {
	if !hasReadinessGate(pod) || pod.DeletionTimestamp != nil {
		return nil
	}
	status, reason, msg := corev1.ConditionFalse, "Standby", "this pod does not hold the lease"
	if isHolder {
		status, reason, msg = corev1.ConditionTrue, "Holder", "this pod holds the lease"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == fencingv1alpha1.ConditionHolder && c.Status == status {
			return nil
		}
	}
	base := pod.DeepCopy()
	cond := corev1.PodCondition{Type: fencingv1alpha1.ConditionHolder, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
	replaced := false
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == cond.Type {
			pod.Status.Conditions[i], replaced = cond, true
		}
	}
	if !replaced {
		pod.Status.Conditions = append(pod.Status.Conditions, cond)
	}
	if err := client.IgnoreNotFound(r.Status().Patch(ctx, pod, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("set condition %s=%s on pod %s: %w", cond.Type, status, klog.KObj(pod), err)
	}
	return nil
}

func hasReadinessGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == fencingv1alpha1.ConditionHolder {
			return true
		}
	}
	return false
}
