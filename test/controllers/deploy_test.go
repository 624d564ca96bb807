package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestDeployManifest: the example's Deployment is a set of candidates of
// its FencedLease, with holder renewal, and runs the controller as one:
// the FencedLease selects the pod template, the controller is told that
// FencedLease and its pod's namespace, and its service account is bound
// to the Lease's ClusterRole and its own. The API server checks each
// object's schema (a server-side dry run).
func TestDeployManifest(t *testing.T) {
	harness.Needs(t, harness.ControlPlane)
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(exampleDir(), "config", "deploy", "widget-controller.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	ns, err := testenv.Namespace(ctx, admin, "deploy")
	g.Expect(err).NotTo(HaveOccurred())
	var fl fencingv1alpha1.FencedLease
	var dep appsv1.Deployment
	roles := map[string]bool{}
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err != nil {
			g.Expect(errors.Is(err, io.EOF)).To(BeTrue(), "%v", err)
			break
		}
		u.SetNamespace(ns)
		g.Expect(admin.Create(ctx, u.DeepCopy(), &client.CreateOptions{DryRun: []string{metav1.DryRunAll}})).To(Succeed(), u.GetKind())
		switch u.GetKind() {
		case "FencedLease":
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &fl)).To(Succeed())
		case "Deployment":
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &dep)).To(Succeed())
		case "RoleBinding":
			ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
			roles[ref] = true
		}
	}
	g.Expect(fl.Spec.Renewal).To(Equal(fencingv1alpha1.RenewalHolder))
	sel, err := metav1.LabelSelectorAsSelector(&fl.Spec.Selector)
	g.Expect(err).NotTo(HaveOccurred())
	tpl := dep.Spec.Template
	g.Expect(sel.Matches(labels.Set(tpl.Labels))).To(BeTrue(), "the FencedLease selects the Deployment's pods")
	g.Expect(*dep.Spec.Replicas).To(BeNumerically(">=", 2))
	c := tpl.Spec.Containers[0]
	g.Expect(c.Args).To(ContainElement("--fenced-lease=" + fl.Name))
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	g.Expect(env).To(Equal(map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}))
	g.Expect(roles).To(Equal(map[string]bool{"fencedlease-workload": true, widgetRole: true}))
}
