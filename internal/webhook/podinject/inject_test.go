package podinject

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pod builds a pod with an init container "init" and containers "app" and
// "helper"; mutate changes it.
func pod(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", Labels: map[string]string{"app": "db", "fencedlease.io/inject": "true"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "i"}},
			Containers:     []corev1.Container{{Name: "app", Image: "a"}, {Name: "helper", Image: "h"}},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// injected is what Inject makes of pod(nil).
func injected(gate bool, mutate func(*corev1.Pod)) *corev1.Pod {
	return pod(func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, Volume())
		for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range cs {
				cs[i].VolumeMounts = append(cs[i].VolumeMounts, Mount())
			}
		}
		if gate {
			p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, ReadinessGate())
		}
		if mutate != nil {
			mutate(p)
		}
	})
}

func TestVolumeProjectsTheTokenAnnotations(t *testing.T) {
	g := NewWithT(t)
	v := Volume()
	g.Expect(v.Name).To(Equal("fencedlease-token"))
	g.Expect(v.DownwardAPI).NotTo(BeNil())
	g.Expect(*v.DownwardAPI.DefaultMode).To(Equal(int32(0o644)))
	g.Expect(v.DownwardAPI.Items).To(Equal([]corev1.DownwardAPIVolumeFile{
		{Path: "fence", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/fence']"}},
		{Path: "lease", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/lease']"}},
		{Path: "role", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/role']"}},
		{Path: "shards", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/shards']"}},
	}))
	g.Expect(Mount()).To(Equal(corev1.VolumeMount{Name: "fencedlease-token", MountPath: "/etc/fencedlease", ReadOnly: true}))
	g.Expect(ReadinessGate()).To(Equal(corev1.PodReadinessGate{ConditionType: "fencedlease.io/holder"}))
}

func TestInject(t *testing.T) {
	dataMount := corev1.VolumeMount{Name: "data", MountPath: "/data"}
	dataVolume := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		gate        bool
		want        *corev1.Pod
		wantChanged bool
	}{{
		name:        "plain pod gets volume and a mount in every container",
		pod:         pod(nil),
		want:        injected(false, nil),
		wantChanged: true,
	}, {
		name:        "readiness gate when asked",
		pod:         pod(nil),
		gate:        true,
		want:        injected(true, nil),
		wantChanged: true,
	}, {
		name: "user volumes, mounts and gates are kept, ours are appended",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{dataVolume}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{dataMount}
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/warm"}}
		}),
		gate: true,
		want: injected(false, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{dataVolume, Volume()}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{dataMount, Mount()}
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/warm"}, ReadinessGate()}
		}),
		wantChanged: true,
	}, {
		name:        "an injected pod is unchanged",
		pod:         injected(true, nil),
		gate:        true,
		want:        injected(true, nil),
		wantChanged: false,
	}, {
		name:        "a gate the user added is kept when the FencedLease does not ask for it",
		pod:         injected(true, nil),
		gate:        false,
		want:        injected(true, nil),
		wantChanged: false,
	}, {
		name: "the volume as a user writes it (no defaults, other item order) is ours",
		pod: injected(false, func(p *corev1.Pod) {
			v := Volume()
			v.DownwardAPI.DefaultMode = nil
			items := v.DownwardAPI.Items
			items[0], items[2] = items[2], items[0]
			items[1].FieldRef.APIVersion = ""
			p.Spec.Volumes = []corev1.Volume{v}
		}),
		want: injected(false, func(p *corev1.Pod) {
			v := Volume()
			v.DownwardAPI.DefaultMode = nil
			items := v.DownwardAPI.Items
			items[0], items[2] = items[2], items[0]
			items[1].FieldRef.APIVersion = ""
			p.Spec.Volumes = []corev1.Volume{v}
		}),
		wantChanged: false,
	}, {
		name: "a container added after injection gets the mount, once",
		pod: injected(false, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "s"})
		}),
		want: injected(false, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "s", VolumeMounts: []corev1.VolumeMount{Mount()}})
		}),
		wantChanged: true,
	}, {
		name: "the token volume mounted elsewhere as well is allowed",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: VolumeName, MountPath: "/run/token", ReadOnly: true}}
		}),
		want: injected(false, func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: VolumeName, MountPath: "/run/token", ReadOnly: true}, Mount()}
		}),
		wantChanged: true,
	}, {
		name: "mounts at a parent or a sibling of the token directory are no conflict",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{dataVolume}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc"}, {Name: "data", MountPath: "/etc/fencedlease2"}}
		}),
		want: injected(false, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{dataVolume, Volume()}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc"}, {Name: "data", MountPath: "/etc/fencedlease2"}, Mount()}
		}),
		wantChanged: true,
	}, {
		name: "the injected mount written with a trailing slash is ours",
		pod: injected(false, func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].MountPath = "/etc/fencedlease/"
		}),
		want: injected(false, func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].MountPath = "/etc/fencedlease/"
		}),
		wantChanged: false,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := tt.pod.DeepCopy()
			changed, err := Inject(got, tt.gate)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(changed).To(Equal(tt.wantChanged))
			g.Expect(got).To(Equal(tt.want))

			// Idempotent: a second run (a re-invocation) changes nothing.
			again := got.DeepCopy()
			changed, err = Inject(again, tt.gate)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(changed).To(BeFalse())
			g.Expect(again).To(Equal(got))
		})
	}
}

func TestInjectConflicts(t *testing.T) {
	other := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		wantErr string
	}{{
		name: "volume of the same name with another source",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": volume "fencedlease-token" already exists with a different source; the name is reserved for the token files`,
	}, {
		name: "downward-API volume of the same name with other items",
		pod: pod(func(p *corev1.Pod) {
			v := Volume()
			v.DownwardAPI.Items = v.DownwardAPI.Items[:1]
			p.Spec.Volumes = []corev1.Volume{v}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": volume "fencedlease-token" already exists with a different source; the name is reserved for the token files`,
	}, {
		name: "downward-API volume of the same name with another mode",
		pod: pod(func(p *corev1.Pod) {
			v := Volume()
			*v.DownwardAPI.DefaultMode = 0o600
			p.Spec.Volumes = []corev1.Volume{v}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": volume "fencedlease-token" already exists with a different source; the name is reserved for the token files`,
	}, {
		name: "another volume at the token directory",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{other}
			p.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc/fencedlease"}}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": container "helper" mounts volume "data" at "/etc/fencedlease", inside /etc/fencedlease where the token files are mounted`,
	}, {
		name: "another volume under the token directory in an init container",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{other}
			p.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc/fencedlease/extra"}}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": init container "init" mounts volume "data" at "/etc/fencedlease/extra", inside /etc/fencedlease where the token files are mounted`,
	}, {
		name: "the token volume mounted writable",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{Volume()}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: VolumeName, MountPath: "/etc/fencedlease"}}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": container "app" mounts volume "fencedlease-token" at "/etc/fencedlease", but the token files must be mounted read-only at /etc/fencedlease without subPath`,
	}, {
		name: "a file of the token volume mounted by subPath",
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{Volume()}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: VolumeName, MountPath: "/etc/fencedlease/fence", SubPath: "fence", ReadOnly: true}}
		}),
		wantErr: `cannot mount the fencedlease token files into pod "ns/db-0": container "app" mounts volume "fencedlease-token" at "/etc/fencedlease/fence", but the token files must be mounted read-only at /etc/fencedlease without subPath`,
	}, {
		name: "every conflict is named, in spec order, for a pod with only a generateName",
		pod: pod(func(p *corev1.Pod) {
			p.Name, p.GenerateName = "", "db-7d4b9c-"
			p.Spec.Volumes = []corev1.Volume{other, {Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			p.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc/fencedlease"}}
			p.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc/fencedlease/x/y"}}
		}),
		wantErr: `cannot mount the fencedlease token files into pod with generateName "db-7d4b9c-" in namespace "ns": ` +
			`volume "fencedlease-token" already exists with a different source; the name is reserved for the token files; ` +
			`init container "init" mounts volume "data" at "/etc/fencedlease", inside /etc/fencedlease where the token files are mounted; ` +
			`container "helper" mounts volume "data" at "/etc/fencedlease/x/y", inside /etc/fencedlease where the token files are mounted`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := tt.pod.DeepCopy()
			changed, err := Inject(got, true)
			g.Expect(err).To(MatchError(tt.wantErr))
			var conflict *ConflictError
			g.Expect(err).To(BeAssignableToTypeOf(conflict))
			g.Expect(changed).To(BeFalse())
			g.Expect(got).To(Equal(tt.pod), "a denied pod must not be changed")
		})
	}
}
