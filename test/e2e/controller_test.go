//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var widgetGVK = schema.GroupVersionKind{Group: "examples.fencedlease.io", Version: "v1alpha1", Kind: "Widget"}

// TestFencedControllerOnRealPods: the example fenced controller as its
// manifests deploy it — two replicas of its image, renewal Holder — runs as
// real pods on the real node, in the pod network, reaching the API server
// through the kubernetes Service as any in-cluster client does. Only the
// holder's controller writes a Widget's status, stamped with its pod and
// fence; when the holder's pod is deleted, the other replica takes over
// with a higher fence and reconciles the next change.
func TestFencedControllerOnRealPods(t *testing.T) {
	needRealNode(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "widgets-"}}
	g.Expect(admin.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), ns) })
	config := filepath.Join(testenv.RepoRoot(), "examples", "fenced-controller", "config")
	for _, f := range []string{"crd/examples.fencedlease.io_widgets.yaml", "rbac/role.yaml"} {
		for _, o := range manifests(t, filepath.Join(config, f)) {
			if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	for _, o := range manifests(t, filepath.Join(config, "deploy", "widget-controller.yaml")) {
		o.SetNamespace(ns.Name)
		if o.GetKind() == "Deployment" {
			dep := &appsv1.Deployment{}
			g.Expect(admin.Scheme().Convert(o, dep, nil)).To(Succeed())
			cluster.OnRealNode(&dep.Spec.Template.Spec)
			dep.Spec.Template.Spec.HostNetwork = false
			dep.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
			g.Expect(admin.Create(ctx, dep)).To(Succeed())
			continue
		}
		g.Expect(admin.Create(ctx, o)).To(Succeed())
	}
	g.Eventually(func() error {
		return admin.Get(ctx, client.ObjectKey{Name: "widgets.examples.fencedlease.io"}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}})
	}).WithTimeout(timeout).Should(Succeed())

	holder := func(not string) (string, int64) {
		var name string
		var fence int64
		g.Eventually(func(g Gomega) {
			p, f, ok, err := cluster.Holder(ctx, admin, ns.Name, "widget-controller")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ok).To(BeTrue())
			g.Expect(p.Name).NotTo(Equal(not))
			g.Expect(p.Spec.NodeName).To(Equal(realNode))
			name, fence = p.Name, f
		}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Succeed())
		return name, fence
	}
	reconciledBy := func(message, pod string, fence int64) {
		g.Eventually(func(g Gomega) {
			w := &unstructured.Unstructured{}
			w.SetGroupVersionKind(widgetGVK)
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "one"}, w)).To(Succeed())
			status, _, _ := unstructured.NestedMap(w.Object, "status")
			g.Expect(status).To(HaveKeyWithValue("message", message))
			g.Expect(status).To(HaveKeyWithValue("holder", pod))
			g.Expect(status).To(HaveKeyWithValue("fence", fence))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "Widget one reconciled to %q by the holder %s with fence %d", message, pod, fence)
	}

	first, fence := holder("")
	widget := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"message": "hello"}}}
	widget.SetGroupVersionKind(widgetGVK)
	widget.SetNamespace(ns.Name)
	widget.SetName("one")
	g.Expect(admin.Create(ctx, widget)).To(Succeed())
	reconciledBy("hello", first, fence)

	g.Expect(admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: first}})).To(Succeed())
	second, next := holder(first)
	g.Expect(next).To(BeNumerically(">", fence))
	g.Expect(admin.Patch(ctx, widget, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"message":"again"}}`)))).To(Succeed())
	reconciledBy("again", second, next)
}

// manifests decodes the YAML documents of a file.
func manifests(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		err := dec.Decode(&o.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(o.Object) > 0 {
			out = append(out, o)
		}
	}
}
