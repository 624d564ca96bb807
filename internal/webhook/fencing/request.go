package fencing

import (
	"encoding/json"
	"fmt"
	"reflect"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	rules "github.com/fencedlease/fencedlease/internal/fencing"
)

// Keys of the user info extra that the API server sets from a service-account
// token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// toRequest gathers the inputs of the rules from an admission request. Only
// the metadata of the objects is decoded: a Secret's data never leaves the
// raw bytes.
func toRequest(req admission.Request) (rules.Request, error) {
	r := rules.Request{
		Operation: rules.Operation(req.Operation),
		Kind:      req.Kind.Kind,
		Namespace: req.Namespace,
		Name:      req.Name,
		Caller:    callerOf(req.UserInfo),
		DryRun:    ptr.Deref(req.DryRun, false),
	}
	old, oldName, err := metadataOf(req.OldObject.Raw)
	if err != nil {
		return r, fmt.Errorf("decode the metadata of the old object: %w", err)
	}
	obj, newName, err := metadataOf(req.Object.Raw)
	if err != nil {
		return r, fmt.Errorf("decode the metadata of the object: %w", err)
	}
	r.Old, r.New = old, obj
	if r.Operation == rules.Update && r.Caller.IsSystemCleanup() {
		if r.OwnershipOnly, err = ownershipOnly(req.OldObject.Raw, req.Object.Raw); err != nil {
			return r, fmt.Errorf("compare the old and the new object: %w", err)
		}
	}
	if r.Name == "" {
		r.Name = newName
	}
	if r.Name == "" {
		r.Name = oldName
	}
	switch {
	case r.Operation == rules.Create && r.New == nil,
		r.Operation == rules.Update && (r.New == nil || r.Old == nil),
		r.Operation == rules.Delete && r.Old == nil:
		return r, fmt.Errorf("%s request without the object it needs", r.Operation)
	case r.Operation != rules.Create && r.Operation != rules.Update && r.Operation != rules.Delete:
		return r, fmt.Errorf("unexpected operation %s", r.Operation)
	}
	return r, nil
}

// ownershipOnly reports whether two versions of an object differ in nothing
// but ownerReferences, finalizers and the API server's bookkeeping. It decodes
// whole objects, so it runs only for the system cleanup principals; nothing of
// them is logged.
func ownershipOnly(oldRaw, newRaw []byte) (bool, error) {
	var o, n map[string]any
	if err := json.Unmarshal(oldRaw, &o); err != nil {
		return false, err
	}
	if err := json.Unmarshal(newRaw, &n); err != nil {
		return false, err
	}
	for _, obj := range []map[string]any{o, n} {
		if md, ok := obj["metadata"].(map[string]any); ok {
			for _, k := range []string{"ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation"} {
				delete(md, k)
			}
		}
	}
	return reflect.DeepEqual(o, n), nil
}

// metadataOf decodes the metadata of a raw object; nil when there is none.
func metadataOf(raw []byte) (*rules.Object, string, error) {
	if len(raw) == 0 {
		return nil, "", nil
	}
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", err
	}
	return &rules.Object{Labels: m.Labels, Annotations: m.Annotations}, m.Name, nil
}

func callerOf(u authenticationv1.UserInfo) rules.Caller {
	c := rules.Caller{Username: u.Username, Groups: u.Groups}
	if v := u.Extra[extraPodUID]; len(v) == 1 {
		c.PodUID = types.UID(v[0])
	}
	if v := u.Extra[extraPodName]; len(v) == 1 {
		c.PodName = v[0]
	}
	return c
}
