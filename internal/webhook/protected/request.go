package protected

import (
	"encoding/json"
	"fmt"
	"reflect"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencedlease/fencedlease/internal/fencing"
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
func toRequest(req admission.Request) (fencing.Request, error) {
	r := fencing.Request{
		Operation:   fencing.Operation(req.Operation),
		Kind:        req.Kind.Kind,
		Namespace:   req.Namespace,
		Name:        req.Name,
		SubResource: req.SubResource,
		Caller:      callerOf(req.UserInfo),
		DryRun:      ptr.Deref(req.DryRun, false),
	}
	if r.SubResource != "" {
		var err error
		if r.FieldManager, err = fieldManagerOf(req.Options.Raw); err != nil {
			return r, fmt.Errorf("decode the options of the request: %w", err)
		}
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
	if r.Operation == fencing.Update && r.Caller.IsSystemCleanup() {
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
	case r.Operation == fencing.Create && r.New == nil,
		r.Operation == fencing.Update && (r.New == nil || r.Old == nil),
		r.Operation == fencing.Delete && r.Old == nil:
		return r, fmt.Errorf("%s request without the object it needs", r.Operation)
	case r.Operation != fencing.Create && r.Operation != fencing.Update && r.Operation != fencing.Delete:
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

// fieldManagerOf decodes the field manager of a request's options (create,
// update and patch options all carry it); "" when there is none.
func fieldManagerOf(raw []byte) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var o struct {
		FieldManager string `json:"fieldManager"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", err
	}
	return o.FieldManager, nil
}

// metadataOf decodes the metadata of a raw object; nil when there is none.
func metadataOf(raw []byte) (*fencing.Object, string, error) {
	if len(raw) == 0 {
		return nil, "", nil
	}
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", err
	}
	o := &fencing.Object{Labels: m.Labels, Annotations: m.Annotations}
	for _, ref := range m.OwnerReferences {
		o.Owners = append(o.Owners, fencing.OwnerRef{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID})
	}
	return o, m.Name, nil
}

func callerOf(u authenticationv1.UserInfo) fencing.Caller {
	c := fencing.Caller{Username: u.Username, Groups: u.Groups}
	if v := u.Extra[extraPodUID]; len(v) == 1 {
		c.PodUID = types.UID(v[0])
	}
	if v := u.Extra[extraPodName]; len(v) == 1 {
		c.PodName = v[0]
	}
	return c
}
