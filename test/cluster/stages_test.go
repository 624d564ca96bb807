package cluster

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// TestStages: every embedded document is a kwok Stage with a name, for
// nodes or pods, and the pod stages leave the readiness gates' conditions
// to their owner (kwok's own fast stage sets them all True).
func TestStages(t *testing.T) {
	g := NewWithT(t)
	entries, err := stages.ReadDir("stages")
	g.Expect(err).NotTo(HaveOccurred())
	names := map[string]bool{}
	for _, e := range entries {
		b, err := stages.ReadFile("stages/" + e.Name())
		g.Expect(err).NotTo(HaveOccurred())
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var s struct {
				APIVersion, Kind string
				Metadata         struct{ Name string }
				Spec             struct {
					ResourceRef struct{ Kind string } `json:"resourceRef"`
					Next        struct {
						StatusTemplate string `json:"statusTemplate"`
					}
				}
			}
			g.Expect(yaml.Unmarshal([]byte(doc), &s)).To(Succeed(), e.Name())
			g.Expect(s.APIVersion).To(Equal("kwok.x-k8s.io/v1alpha1"), e.Name())
			g.Expect(s.Kind).To(Equal("Stage"), e.Name())
			g.Expect(s.Metadata.Name).NotTo(BeEmpty(), e.Name())
			g.Expect(s.Spec.ResourceRef.Kind).To(BeElementOf("Node", "Pod"), e.Name())
			g.Expect(s.Spec.Next.StatusTemplate).NotTo(ContainSubstring("range .spec.readinessGates"), e.Name())
			g.Expect(names).NotTo(HaveKey(s.Metadata.Name), "stage names are unique")
			names[s.Metadata.Name] = true
		}
	}
	for _, want := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-holder-gate-ready",
		"pod-holder-gate-not-ready", "pod-complete", "pod-delete"} {
		g.Expect(names).To(HaveKey(want))
	}
}
