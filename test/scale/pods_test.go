//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// createPod creates a pod with what a Deployment's pod carries (an app
// container and a sidecar with environment, resources, probes and
// mounts; volumes; tolerations) and sets the status a kubelet reports for
// it running and ready since readySince: about 5 KiB of JSON, so that the
// operator's pod cache holds pods of a realistic size.
func createPod(ctx context.Context, c client.Client, ns, name, app, node string, readySince time.Time) error {
	pod, err := testenv.CreatePod(ctx, c, testenv.Pod{Namespace: ns, Name: name, Node: node,
		Labels: map[string]string{"app": app, "pod-template-hash": "5d8f7c9b4"}, Mutate: realisticSpec})
	if err != nil {
		return err
	}
	since := metav1.NewTime(readySince.Truncate(time.Second))
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "192.168.10.20", PodIP: "10.244.3.17", PodIPs: []corev1.PodIP{{IP: "10.244.3.17"}},
		StartTime: &since, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: since},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: since},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: since},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since},
		},
	}
	for _, ctr := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Ready: true, Started: ptr.To(true), Image: ctr.Image,
			ImageID:     "registry.example/" + ctr.Name + "@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			ContainerID: "containerd://" + fmt.Sprintf("%064x", len(name)*7919+len(ctr.Name)),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}},
		})
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("set pod %s/%s running: %w", ns, name, err)
	}
	return nil
}

func realisticSpec(p *corev1.Pod) {
	env := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "DATABASE_URL", Value: "postgres://app@db.example.svc:5432/app?sslmode=require"},
		{Name: "LOG_LEVEL", Value: "info"},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability.svc:4317"},
		{Name: "CACHE_SIZE_MB", Value: "256"},
		{Name: "FEATURE_FLAGS", Value: "batch-writes,async-flush,compression"},
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 5, TimeoutSeconds: 1, FailureThreshold: 3}
	p.Spec.Containers = []corev1.Container{
		{Name: "app", Image: "registry.example/team/app:v2.14.3", Command: []string{"/app"}, Args: []string{"--config=/etc/app/config.yaml", "--port=8080"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
			Env:   env, Resources: res, ReadinessProbe: probe, LivenessProbe: probe,
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "data", MountPath: "/var/lib/app"}, {Name: "tls", MountPath: "/etc/tls", ReadOnly: true}}},
		{Name: "proxy", Image: "registry.example/mesh/proxy:1.24.1", Args: []string{"proxy", "sidecar", "--log-level=warning"},
			Env: env[:3], Resources: res, VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/tls", ReadOnly: true}}},
	}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-tls"}}},
	}
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
}
