package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestShardedDeployManifest: the example's sharded Deployment runs three
// pods of its FencedShardSet (renewal Operator), injected so that their
// shards are projected, and tells the controller the set and its number
// of shards. The API server checks each object's schema (a server-side
// dry run).
func TestShardedDeployManifest(t *testing.T) {
	harness.Needs(t, harness.ControlPlane)
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(exampleDir(), "config", "deploy", "widget-controller-sharded.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	ns, err := testenv.Namespace(ctx, admin, "deploy")
	g.Expect(err).NotTo(HaveOccurred())
	var set fencingv1alpha1.FencedShardSet
	var dep appsv1.Deployment
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
		case "FencedShardSet":
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &set)).To(Succeed())
		case "Deployment":
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &dep)).To(Succeed())
		}
	}
	g.Expect(set.Spec.Renewal).To(Equal(fencingv1alpha1.RenewalOperator))
	sel, err := metav1.LabelSelectorAsSelector(&set.Spec.Selector)
	g.Expect(err).NotTo(HaveOccurred())
	tpl := dep.Spec.Template
	g.Expect(sel.Matches(labels.Set(tpl.Labels))).To(BeTrue(), "the FencedShardSet selects the Deployment's pods")
	g.Expect(tpl.Labels).To(HaveKeyWithValue("fencedlease.io/inject", "true"))
	g.Expect(*dep.Spec.Replicas).To(Equal(int32(3)))
	g.Expect(tpl.Spec.Containers[0].Args).To(ConsistOf("--fenced-shard-set="+set.Name, fmt.Sprintf("--shards=%d", set.Spec.Shards)))
}
