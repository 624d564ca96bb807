package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/policy"
)

// PolicyFiles are the admission policies installed by default: the files of
// config/policy/kustomization.yaml.
func PolicyFiles() []string {
	return []string{filepath.Join(RepoRoot(), "config", "policy", "operator-state.yaml")}
}

// InstallPolicies creates (or replaces) the objects of the YAML files, and
// waits until the API server enforces the policy operator-state (the name
// config/policy gives it: installed, it carries the install's prefix)
// if it is among them: a policy takes effect a moment after it is created.
func InstallPolicies(ctx context.Context, c client.Client, files ...string) error {
	waitOperatorState := false
	for _, file := range files {
		objs, err := readObjects(file)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := apply(ctx, c, u); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			waitOperatorState = waitOperatorState || u.GetKind() == "ValidatingAdmissionPolicyBinding" && u.GetName() == policy.OperatorState
		}
	}
	if !waitOperatorState {
		return nil
	}
	// A dry-run pod that sets an operator-owned annotation is denied once
	// the policy is in force.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "policy-probe-",
			Annotations: map[string]string{"fencedlease.io/probe": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/probe:1"}}},
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), policy.OperatorState) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policy %s is not enforced after 30s (last answer: %w)", policy.OperatorState, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RemovePolicies deletes the objects of the YAML files.
func RemovePolicies(ctx context.Context, c client.Client, files ...string) error {
	for _, file := range files {
		objs, err := readObjects(file)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := client.IgnoreNotFound(c.Delete(ctx, u)); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	return nil
}

func readObjects(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out, nil
}

// fromMap converts decoded YAML into a typed object.
func fromMap(m map[string]any, obj any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, obj)
}
