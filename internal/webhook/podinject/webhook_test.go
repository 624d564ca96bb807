package podinject_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/webhook/podinject"
	"github.com/fencedlease/fencedlease/test/harness"
)

// tokenVolume is the volume as the API server stores it.
var tokenVolume = corev1.Volume{
	Name: "fencedlease-token",
	VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{
			{Path: "fence", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/fence']"}},
			{Path: "lease", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/lease']"}},
			{Path: "role", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/role']"}},
			{Path: "shards", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['fencedlease.io/shards']"}},
		},
		DefaultMode: ptr.To[int32](0o644),
	}},
}

var tokenMount = corev1.VolumeMount{Name: "fencedlease-token", MountPath: "/etc/fencedlease", ReadOnly: true}

// mounts maps each container and init container to its mounts.
func mounts(p *corev1.Pod) map[string][]corev1.VolumeMount {
	out := map[string][]corev1.VolumeMount{}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		out[c.Name] = c.VolumeMounts
	}
	return out
}

func TestLabelledPodGetsTokenFiles(t *testing.T) {
	t.Parallel()
	for _, gate := range []bool{true, false} {
		name := map[bool]string{true: "readiness gate", false: "no readiness gate"}[gate]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.ReadinessGate = gate })
			data := corev1.VolumeMount{Name: "data", MountPath: "/data"}
			pod, err := f.createPod("a", injectLabels(), func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
				p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{data}
			})
			f.g.Expect(err).NotTo(HaveOccurred())
			f.g.Expect(f.w.take()).To(BeEmpty())

			f.g.Expect(pod.Spec.Volumes).To(HaveLen(2))
			f.g.Expect(pod.Spec.Volumes[0].Name).To(Equal("data"))
			f.g.Expect(pod.Spec.Volumes[1]).To(Equal(tokenVolume))
			f.g.Expect(mounts(pod)).To(Equal(map[string][]corev1.VolumeMount{
				"init":   {tokenMount},
				"app":    {data, tokenMount},
				"helper": {tokenMount},
			}))
			if gate {
				f.g.Expect(pod.Spec.ReadinessGates).To(Equal([]corev1.PodReadinessGate{{ConditionType: "fencedlease.io/holder"}}))
			} else {
				f.g.Expect(pod.Spec.ReadinessGates).To(BeEmpty())
			}
		})
	}
}

// TestUnlabelledPodIsNotSentToWebhook runs alone (not in parallel), so that
// the webhook's request counter moves only for its own pods.
func TestUnlabelledPodIsNotSentToWebhook(t *testing.T) {
	f := newFixture(t)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.ReadinessGate = true })
	before := webhookRequests(f.g)

	// The webhook would deny this pod (its volume takes the reserved name):
	// it is created, so the API server did not call the webhook.
	clash := []corev1.Volume{{Name: "fencedlease-token", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod, err := f.createPod("plain", appLabels, func(p *corev1.Pod) { p.Spec.Volumes = clash })
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(pod.Spec.Volumes).To(HaveLen(1))
	f.g.Expect(pod.Spec.Volumes[0].EmptyDir).NotTo(BeNil())
	f.g.Expect(mounts(pod)).To(Equal(map[string][]corev1.VolumeMount{"init": nil, "app": nil, "helper": nil}))
	f.g.Expect(pod.Spec.ReadinessGates).To(BeEmpty())
	f.g.Expect(f.w.take()).To(BeEmpty())
	f.g.Expect(webhookRequests(f.g)).To(Equal(before))

	// The counter does count: a labelled pod is sent.
	_, err = f.createPod("labelled", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(webhookRequests(f.g)).To(Equal(before + 1))
}

// webhookRequests is the number of requests the pod webhook has served.
func webhookRequests(g Gomega) float64 {
	families, err := harness.Gather(metrics.Registry)
	g.Expect(err).NotTo(HaveOccurred())
	// Served under Path/<token>, instrumented as Path/.
	total, _ := harness.Sample(families, "controller_runtime_webhook_requests_total", map[string]string{"webhook": podinject.Path + "/"})
	return total
}

func TestPodNotSelectedIsAdmittedUnchangedWithWarning(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fencedLease("web", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Selector.MatchLabels = map[string]string{"app": "web"}
		fl.Spec.ReadinessGate = true
	})

	pod, err := f.createPod("a", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(f.w.take()).To(Equal([]string{
		`pod "` + f.ns + `/a" has label fencedlease.io/inject=true but no FencedLease or FencedShardSet in namespace "` + f.ns + `" selects it: no token files are mounted`,
	}))
	f.g.Expect(pod.Spec.Volumes).To(BeEmpty())
	f.g.Expect(mounts(pod)).To(Equal(map[string][]corev1.VolumeMount{"init": nil, "app": nil, "helper": nil}))
	f.g.Expect(pod.Spec.ReadinessGates).To(BeEmpty())

	// A pod of a Deployment has only a generateName at CREATE.
	_, err = f.createPod("", injectLabels(), func(p *corev1.Pod) { p.GenerateName = "db-7d4b9c-" })
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(f.w.take()).To(Equal([]string{
		`pod with generateName "db-7d4b9c-" in namespace "` + f.ns + `" has label fencedlease.io/inject=true but no FencedLease or FencedShardSet in namespace "` + f.ns + `" selects it: no token files are mounted`,
	}))
}

func TestConflictsAreDenied(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fencedLease("db", nil)
	data := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	const prefix = `admission webhook "podinject.fencedlease.io" denied the request: cannot mount the fencedlease token files into `
	tests := []struct {
		name, pod string
		mutate    func(*corev1.Pod)
		want      string
	}{{
		name: "volume with the reserved name",
		pod:  "volume",
		mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "fencedlease-token", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		},
		want: prefix + `pod "` + f.ns + `/volume": volume "fencedlease-token" already exists with a different source; the name is reserved for the token files`,
	}, {
		name: "another volume mounted at the token directory",
		pod:  "mount",
		mutate: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{data}
			p.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc/fencedlease"}}
		},
		want: prefix + `pod "` + f.ns + `/mount": container "helper" mounts volume "data" at "/etc/fencedlease", inside /etc/fencedlease where the token files are mounted`,
	}, {
		name: "another volume under the token directory, in an init container of a generated pod",
		mutate: func(p *corev1.Pod) {
			p.GenerateName = "db-7d4b9c-"
			p.Spec.Volumes = []corev1.Volume{data}
			p.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/etc/fencedlease/cache"}}
		},
		want: prefix + `pod with generateName "db-7d4b9c-" in namespace "` + f.ns + `": init container "init" mounts volume "data" at "/etc/fencedlease/cache", inside /etc/fencedlease where the token files are mounted`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := f.createPod(tt.pod, injectLabels(), tt.mutate)
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
			var status apierrors.APIStatus
			g.Expect(errors.As(err, &status)).To(BeTrue())
			g.Expect(status.Status().Message).To(Equal(tt.want))
		})
	}
	var pods corev1.PodList
	f.g.Expect(f.c.List(f.ctx, &pods)).To(Succeed())
	for _, p := range pods.Items {
		f.g.Expect(p.Namespace).NotTo(Equal(f.ns), "denied pod %s was created", p.Name)
	}
}

func TestInjectedPodIsAdmittedUnchanged(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.ReadinessGate = true })
	gates := []corev1.PodReadinessGate{{ConditionType: "fencedlease.io/holder"}}
	tests := []struct {
		name   string
		volume corev1.Volume
	}{
		{"exactly as injected", podinject.Volume()},
		{"without the defaults the API server adds", func() corev1.Volume {
			v := podinject.Volume()
			v.DownwardAPI.DefaultMode = nil
			for i := range v.DownwardAPI.Items {
				v.DownwardAPI.Items[i].FieldRef.APIVersion = ""
			}
			return v
		}()},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pod, err := f.createPod("p"+string(rune('a'+i)), injectLabels(), func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{tt.volume}
				for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
					for i := range cs {
						cs[i].VolumeMounts = []corev1.VolumeMount{tokenMount}
					}
				}
				p.Spec.ReadinessGates = gates
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Spec.Volumes).To(Equal([]corev1.Volume{tokenVolume}))
			g.Expect(mounts(pod)).To(Equal(map[string][]corev1.VolumeMount{"init": {tokenMount}, "app": {tokenMount}, "helper": {tokenMount}}))
			g.Expect(pod.Spec.ReadinessGates).To(Equal(gates))
		})
	}
}

func TestContainerAddedByALaterWebhookGetsTheMount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.ReadinessGate = true })

	pod, err := f.createPod("a", injectLabels(sidecarLabel, "true"), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(pod.Spec.Volumes).To(Equal([]corev1.Volume{tokenVolume}))
	f.g.Expect(mounts(pod)).To(Equal(map[string][]corev1.VolumeMount{
		"init": {tokenMount}, "app": {tokenMount}, "helper": {tokenMount}, "sidecar": {tokenMount},
	}))
	f.g.Expect(pod.Spec.ReadinessGates).To(Equal([]corev1.PodReadinessGate{{ConditionType: "fencedlease.io/holder"}}))
}

// A pod that a FencedShardSet selects gets the token files, the shards file
// among them, and no readiness gate.
func TestShardSetPodGetsTokenFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "work"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: appLabels}, Shards: 4}}
	f.g.Expect(f.c.Create(f.ctx, set)).To(Succeed())
	pod, err := f.createPod("a", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(pod.Spec.Volumes).To(Equal([]corev1.Volume{tokenVolume}))
	f.g.Expect(tokenVolume.DownwardAPI.Items).To(ContainElement(HaveField("Path", "shards")))
	f.g.Expect(mounts(pod)).To(Equal(map[string][]corev1.VolumeMount{"init": {tokenMount}, "app": {tokenMount}, "helper": {tokenMount}}))
	f.g.Expect(pod.Spec.ReadinessGates).To(BeEmpty())
}
