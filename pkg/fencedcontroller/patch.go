package fencedcontroller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// stampedPatch is a patch of a main resource that also sets the fence
// annotation, whatever the patch the caller built says about it: a merge
// patch computed from a cached copy leaves the annotation out when the copy
// already carried the same value, and the API server would then keep the
// stored one, which may be a newer holder's. The webhook must see the
// caller's own fence, so it is always written out.
type stampedPatch struct {
	client.Patch
	fence int64
}

// Data returns the caller's patch with the fence annotation set in it.
func (p stampedPatch) Data(obj client.Object) ([]byte, error) {
	data, err := p.Patch.Data(obj)
	if err != nil {
		return nil, err
	}
	return stampPatchData(p.Type(), data, p.fence)
}

// stampPatchData sets the fence annotation in a patch of a main resource:
//   - a JSON merge patch, a strategic merge patch, or an apply patch (JSON
//     or YAML): metadata.annotations gets the key, whatever else it says;
//   - a JSON patch (RFC 6902): an "add" operation of the key is appended,
//     which sets it whether or not it exists; like every JSON patch
//     operation it needs its parent, metadata.annotations, on the stored
//     object, which every object written through this client has (it
//     carries the fence annotation);
//   - anything else (a CBOR apply patch) is refused: it cannot be stamped.
func stampPatchData(t types.PatchType, data []byte, fenceValue int64) ([]byte, error) {
	value := strconv.FormatInt(fenceValue, 10)
	switch t {
	case types.JSONPatchType:
		return stampJSONPatch(data, value)
	case types.MergePatchType, types.StrategicMergePatchType:
		return stampObjectPatch(data, value)
	case types.ApplyYAMLPatchType:
		js, err := yaml.ToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("stamp %s on an apply patch: %w", fence.Annotation, err)
		}
		return stampObjectPatch(js, value)
	}
	return nil, fmt.Errorf("stamp %s: a %s patch cannot carry it: use a JSON, merge, strategic merge or (JSON or YAML) apply patch", fence.Annotation, t)
}

// stampObjectPatch sets metadata.annotations[fence.Annotation] in a patch
// that is a JSON object. Numbers are kept as they were written.
func stampObjectPatch(data []byte, value string) ([]byte, error) {
	var doc map[string]any
	if err := decodeJSON(data, &doc); err != nil {
		return nil, fmt.Errorf("stamp %s: the patch is not a JSON object: %w", fence.Annotation, err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	md, err := member(doc, "metadata")
	if err != nil {
		return nil, err
	}
	ann, err := member(md, "annotations")
	if err != nil {
		return nil, err
	}
	ann[fence.Annotation] = value
	return json.Marshal(doc)
}

// member returns the object under key, creating it when absent. A null
// there would remove it all in a merge patch: the fence annotation cannot
// be kept and the rest removed in the same patch.
func member(parent map[string]any, key string) (map[string]any, error) {
	v, ok := parent[key]
	if !ok {
		m := map[string]any{}
		parent[key] = m
		return m, nil
	}
	m, isMap := v.(map[string]any)
	switch {
	case v == nil:
		return nil, fmt.Errorf("stamp %s: the patch removes all of %s, and the fence annotation must stay: remove the other keys one by one", fence.Annotation, key)
	case !isMap:
		return nil, fmt.Errorf("stamp %s: %s in the patch is not an object", fence.Annotation, key)
	}
	return m, nil
}

// stampJSONPatch appends an operation that sets the fence annotation.
func stampJSONPatch(data []byte, value string) ([]byte, error) {
	var ops []json.RawMessage
	if err := decodeJSON(data, &ops); err != nil {
		return nil, fmt.Errorf("stamp %s: the JSON patch is not an array of operations: %w", fence.Annotation, err)
	}
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(fence.Annotation)
	op, err := json.Marshal(map[string]string{"op": "add", "path": path, "value": value})
	if err != nil {
		return nil, err
	}
	return json.Marshal(append(ops, op))
}

// decodeJSON decodes one JSON value, numbers as json.Number, so that a
// patch re-encoded carries the numbers it was given.
func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
