//go:build apf

package flowcontrol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// renderFlowControl renders the operator's API Priority and Fairness objects
// as an install would create them: from the chart (helm template, release
// fencedlease in the operator's namespace, the default values), or, with
// APF_INSTALL=kustomize, from config/default. Both name the operator's
// service account as testenv.OperatorConfig creates it.
func renderFlowControl(ctx context.Context) ([]*unstructured.Unstructured, string, error) {
	root := testenv.RepoRoot()
	var cmd *exec.Cmd
	source := os.Getenv("APF_INSTALL")
	switch source {
	case "kustomize":
		cmd = exec.CommandContext(ctx, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "kustomize", "config/default")
	case "", "chart":
		source = "chart"
		helm := os.Getenv("FENCEDLEASE_HELM")
		if helm == "" {
			helm = filepath.Join(root, "bin", "tools", "helm-v3.22.0")
		}
		cmd = exec.CommandContext(ctx, helm, "template", "fencedlease", "charts/fencedlease", "--namespace", testenv.OperatorNamespace,
			"--show-only", "templates/flowcontrol.yaml")
	default:
		return nil, "", fmt.Errorf("APF_INSTALL=%q: want chart or kustomize", source)
	}
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("render the %s: %w\n%s", source, err, stderr.String())
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, "", fmt.Errorf("decode the %s's objects: %w", source, err)
		}
		if u.GetAPIVersion() == flowcontrolv1.SchemeGroupVersion.String() {
			out = append(out, u)
		}
	}
	return out, source, nil
}

// classification is a FlowSchema and the priority level it names, by name
// and UID.
type classification struct {
	flowSchema, priorityLevel       string
	flowSchemaUID, priorityLevelUID string
}

// classificationOf reads a FlowSchema and its priority level.
func classificationOf(ctx context.Context, c client.Client, flowSchema string) (classification, error) {
	fs := &flowcontrolv1.FlowSchema{}
	if err := c.Get(ctx, client.ObjectKey{Name: flowSchema}, fs); err != nil {
		return classification{}, fmt.Errorf("get FlowSchema %s: %w", flowSchema, err)
	}
	pl := &flowcontrolv1.PriorityLevelConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: fs.Spec.PriorityLevelConfiguration.Name}, pl); err != nil {
		return classification{}, fmt.Errorf("get PriorityLevelConfiguration %s: %w", fs.Spec.PriorityLevelConfiguration.Name, err)
	}
	return classification{flowSchema: fs.Name, priorityLevel: pl.Name, flowSchemaUID: string(fs.UID), priorityLevelUID: string(pl.UID)}, nil
}

// install creates the objects and waits until the API server classifies a
// request of the operator by the FlowSchema among them (its configuration
// follows the objects a moment later).
func install(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, operator *rest.Config) (classification, error) {
	var fsName string
	for _, o := range objs {
		if err := c.Create(ctx, o.DeepCopy()); err != nil {
			return classification{}, fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() == "FlowSchema" {
			fsName = o.GetName()
		}
	}
	if fsName == "" {
		return classification{}, fmt.Errorf("no FlowSchema among the rendered objects")
	}
	want, err := classificationOf(ctx, c, fsName)
	if err != nil {
		return classification{}, err
	}
	probe := &recorder{}
	pc, err := client.New(probe.wrap(operator), client.Options{Scheme: c.Scheme()})
	if err != nil {
		return classification{}, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe.reset()
		_ = pc.Get(ctx, client.ObjectKey{Namespace: testenv.OperatorNamespace, Name: "probe"}, &coordinationv1.Lease{})
		reqs := probe.requests()
		if len(reqs) > 0 && reqs[len(reqs)-1].flowSchema == want.flowSchemaUID {
			return want, nil
		}
		if time.Now().After(deadline) {
			last := "no answer"
			if len(reqs) > 0 {
				last = "FlowSchema UID " + reqs[len(reqs)-1].flowSchema
			}
			return classification{}, fmt.Errorf("the operator's requests are not classified by FlowSchema %s (UID %s) after 30s: the last one by %s", fsName, want.flowSchemaUID, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// flowControlNames lists the names of the objects, for the record.
func flowControlNames(objs []*unstructured.Unstructured) string {
	var names []string
	for _, o := range objs {
		names = append(names, o.GetKind()+" "+o.GetName())
	}
	return strings.Join(names, ", ")
}
