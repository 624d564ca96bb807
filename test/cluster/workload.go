package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// Holder is the pod a FencedLease names as holder, with its fence, once the
// operator has published the grant to the pod (its annotations say holder
// and carry that fence). ok is false while there is none.
func Holder(ctx context.Context, c client.Client, ns, lease string) (pod *corev1.Pod, fence int64, ok bool, err error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: lease}, fl); err != nil {
		return nil, 0, false, err
	}
	if fl.Status.Holder == nil || fl.Status.Fence == 0 {
		return nil, 0, false, nil
	}
	pod = &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fl.Status.Holder.PodName}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, 0, false, nil
		}
		return nil, 0, false, err
	}
	if pod.UID != fl.Status.Holder.PodUID ||
		pod.Annotations[fencingv1alpha1.AnnotationRole] != fencingv1alpha1.RoleHolder ||
		pod.Annotations[fencingv1alpha1.AnnotationFence] != record.FormatFence(fl.Status.Fence) {
		return nil, 0, false, nil
	}
	return pod, fl.Status.Fence, true, nil
}

// PodFence is the fence in the pod's annotation (what its token file says),
// 0 when it has none.
func PodFence(pod *corev1.Pod) int64 {
	n := record.FenceOf(pod.Annotations[fencingv1alpha1.AnnotationFence])
	return n
}

// WriteAs writes the protected ConfigMap ns/name as the pod, with a
// service-account token bound to the pod, carrying fence as its token: what
// a workload does with the fence from its token file. The ConfigMap is
// created (labelled as protected by lease) if it does not exist. The error
// is the API server's answer.
func WriteAs(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, name, lease string, fence int64, data map[string]string) error {
	pc, err := testenv.PodClient(ctx, cfg, pod)
	if err != nil {
		return err
	}
	return WriteWith(ctx, pc, pod, name, lease, fence, data)
}

// WriteWith is WriteAs with a client of the pod's made earlier
// (testenv.PodClient): its token was bound to the pod then, for a pod that
// may be gone by the time it writes.
func WriteWith(ctx context.Context, pc client.Client, pod *corev1.Pod, name, lease string, fence int64, data map[string]string) error {
	cm := &corev1.ConfigMap{}
	err := pc.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name,
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: lease}}}
	case err != nil:
		return fmt.Errorf("read ConfigMap %s/%s as pod %s: %w", pod.Namespace, name, pod.Name, err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[fencingv1alpha1.AnnotationFence] = record.FormatFence(fence)
	cm.Data = data
	if cm.ResourceVersion == "" {
		return pc.Create(ctx, cm)
	}
	return pc.Update(ctx, cm)
}
