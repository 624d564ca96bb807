package podinject

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// VolumeName is the name of the injected downward-API volume. A pod must not
// use it for anything else.
const VolumeName = "fencedlease-token"

// Token files in fencingv1alpha1.TokenDir, one per pod annotation.
var tokenFiles = []struct{ file, annotation string }{
	{"fence", fencingv1alpha1.AnnotationFence},
	{"lease", fencingv1alpha1.AnnotationLease},
	{"role", fencingv1alpha1.AnnotationRole},
	{"shards", fencingv1alpha1.AnnotationShards},
}

// Volume returns the injected volume. It is written in the form the API
// server defaults it to (defaultMode 0644, fieldRef apiVersion v1), so that
// a pod that went through the webhook once compares equal when it comes back
// (re-invocation, or a pod spec copied from an injected pod).
func Volume() corev1.Volume {
	items := make([]corev1.DownwardAPIVolumeFile, 0, len(tokenFiles))
	for _, f := range tokenFiles {
		items = append(items, corev1.DownwardAPIVolumeFile{
			Path:     f.file,
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", f.annotation)},
		})
	}
	return corev1.Volume{
		Name: VolumeName,
		VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items:       items,
			DefaultMode: ptr.To[int32](0o644),
		}},
	}
}

// Mount returns the read-only mount of the volume added to every container.
// It is read-only because the files belong to the kubelet, which swaps them
// atomically; a sub-path mount would never see an update.
func Mount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: VolumeName, MountPath: fencingv1alpha1.TokenDir, ReadOnly: true}
}

// ReadinessGate returns the gate that keeps standbys from becoming Ready.
func ReadinessGate() corev1.PodReadinessGate {
	return corev1.PodReadinessGate{ConditionType: fencingv1alpha1.ConditionHolder}
}

// ConflictError says why a pod cannot get the token files without
// overriding something the user wrote. It is the denial message.
type ConflictError struct {
	// Pod describes the pod (see describePod).
	Pod string
	// Conflicts lists every problem, in the order of the pod spec.
	Conflicts []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("cannot mount the fencedlease token files into %s: %s", e.Pod, strings.Join(e.Conflicts, "; "))
}

// Inject adds the token volume, its mount in every container and init
// container, and, if readinessGate is set, the fencedlease.io/holder
// readiness gate. What the pod already has is kept: running Inject on an
// injected pod changes nothing. When the pod uses the volume name or the
// token directory for something else, Inject changes nothing and returns a
// *ConflictError. It reports whether it changed the pod.
func Inject(pod *corev1.Pod, readinessGate bool) (bool, error) {
	if conflicts := Conflicts(pod); len(conflicts) > 0 {
		return false, &ConflictError{Pod: describePod(pod), Conflicts: conflicts}
	}
	changed := false
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName }) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, Volume())
		changed = true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if !slices.ContainsFunc(cs[i].VolumeMounts, isTokenMount) {
				cs[i].VolumeMounts = append(cs[i].VolumeMounts, Mount())
				changed = true
			}
		}
	}
	gate := ReadinessGate()
	if readinessGate && !slices.Contains(pod.Spec.ReadinessGates, gate) {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, gate)
		changed = true
	}
	return changed, nil
}

// Conflicts lists what in the pod stands in the way of the token files: a
// volume named VolumeName with another source, and any mount at or under
// the token directory other than the read-only mount of that volume.
// Mounting the token volume elsewhere as well is allowed.
func Conflicts(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.Name == VolumeName && !isTokenVolume(v) {
			out = append(out, fmt.Sprintf("volume %q already exists with a different source; the name is reserved for the token files", VolumeName))
		}
	}
	kinds := []struct {
		kind       string
		containers []corev1.Container
	}{{"init container", pod.Spec.InitContainers}, {"container", pod.Spec.Containers}}
	for _, k := range kinds {
		for _, c := range k.containers {
			for _, m := range c.VolumeMounts {
				if !inTokenDir(m.MountPath) || isTokenMount(m) {
					continue
				}
				if m.Name == VolumeName {
					out = append(out, fmt.Sprintf("%s %q mounts volume %q at %q, but the token files must be mounted read-only at %s without subPath", k.kind, c.Name, m.Name, m.MountPath, fencingv1alpha1.TokenDir))
					continue
				}
				out = append(out, fmt.Sprintf("%s %q mounts volume %q at %q, inside %s where the token files are mounted", k.kind, c.Name, m.Name, m.MountPath, fencingv1alpha1.TokenDir))
			}
		}
	}
	return out
}

// isTokenVolume reports whether v is the token volume, allowing for what the
// API server defaults and for the order of the items.
func isTokenVolume(v corev1.Volume) bool {
	if v.DownwardAPI == nil {
		return false
	}
	got := corev1.Volume{Name: v.Name, VolumeSource: *v.VolumeSource.DeepCopy()}
	nd := got.DownwardAPI
	if nd.DefaultMode == nil {
		nd.DefaultMode = ptr.To[int32](0o644)
	}
	for i := range nd.Items {
		if f := nd.Items[i].FieldRef; f != nil && f.APIVersion == "" {
			f.APIVersion = "v1"
		}
	}
	slices.SortFunc(nd.Items, func(a, b corev1.DownwardAPIVolumeFile) int { return strings.Compare(a.Path, b.Path) })
	return equality.Semantic.DeepEqual(got, Volume())
}

// isTokenMount reports whether m is the injected mount.
func isTokenMount(m corev1.VolumeMount) bool {
	return m.Name == VolumeName && path.Clean(m.MountPath) == fencingv1alpha1.TokenDir &&
		m.ReadOnly && m.SubPath == "" && m.SubPathExpr == ""
}

// inTokenDir reports whether p is the token directory or a path under it.
func inTokenDir(p string) bool {
	p = path.Clean(p)
	return p == fencingv1alpha1.TokenDir || strings.HasPrefix(p, fencingv1alpha1.TokenDir+"/")
}

// describePod names a pod in messages. Pods of a Deployment have only a
// generateName at CREATE.
func describePod(pod *corev1.Pod) string {
	if pod.Name == "" && pod.GenerateName != "" {
		return fmt.Sprintf("pod with generateName %q in namespace %q", pod.GenerateName, pod.Namespace)
	}
	return fmt.Sprintf("pod %q", pod.Namespace+"/"+pod.Name)
}
