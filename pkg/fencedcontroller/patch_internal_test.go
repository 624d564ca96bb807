package fencedcontroller

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

func TestStampPatchData(t *testing.T) {
	tests := []struct {
		name string
		t    types.PatchType
		in   string
		want string
		err  string
	}{
		{name: "merge patch without metadata", t: types.MergePatchType, in: `{"spec":{"size":3}}`,
			want: `{"metadata":{"annotations":{"fencedlease.io/fence":"42"}},"spec":{"size":3}}`},
		{name: "merge patch keeps other annotations and sets ours over an older one", t: types.MergePatchType,
			in:   `{"metadata":{"annotations":{"a":"b","fencedlease.io/fence":"41"},"resourceVersion":"7"}}`,
			want: `{"metadata":{"annotations":{"a":"b","fencedlease.io/fence":"42"},"resourceVersion":"7"}}`},
		{name: "empty merge patch", t: types.MergePatchType, in: `{}`, want: `{"metadata":{"annotations":{"fencedlease.io/fence":"42"}}}`},
		{name: "numbers are kept exactly", t: types.MergePatchType, in: `{"spec":{"big":9007199254740993,"f":1.50}}`,
			want: `{"metadata":{"annotations":{"fencedlease.io/fence":"42"}},"spec":{"big":9007199254740993,"f":1.50}}`},
		{name: "strategic merge patch with directives", t: types.StrategicMergePatchType,
			in:   `{"spec":{"$setElementOrder/containers":[{"name":"a"}]},"metadata":{"labels":{"x":null}}}`,
			want: `{"metadata":{"annotations":{"fencedlease.io/fence":"42"},"labels":{"x":null}},"spec":{"$setElementOrder/containers":[{"name":"a"}]}}`},
		{name: "apply patch in YAML", t: types.ApplyYAMLPatchType, in: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
			want: `{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"annotations":{"fencedlease.io/fence":"42"},"name":"c"}}`},
		{name: "JSON patch gets an add", t: types.JSONPatchType, in: `[{"op":"replace","path":"/spec/size","value":3}]`,
			want: `[{"op":"replace","path":"/spec/size","value":3},{"op":"add","path":"/metadata/annotations/fencedlease.io~1fence","value":"42"}]`},
		{name: "merge patch removing every annotation", t: types.MergePatchType, in: `{"metadata":{"annotations":null}}`,
			err: "stamp fencedlease.io/fence: the patch removes all of annotations, and the fence annotation must stay: remove the other keys one by one"},
		{name: "merge patch with metadata not an object", t: types.MergePatchType, in: `{"metadata":[]}`,
			err: "stamp fencedlease.io/fence: metadata in the patch is not an object"},
		{name: "merge patch not an object", t: types.MergePatchType, in: `[1]`,
			err: "stamp fencedlease.io/fence: the patch is not a JSON object: json: cannot unmarshal array into Go value of type map[string]interface {}"},
		{name: "two JSON values", t: types.MergePatchType, in: `{} {}`,
			err: "stamp fencedlease.io/fence: the patch is not a JSON object: more than one JSON value"},
		{name: "JSON patch not an array", t: types.JSONPatchType, in: `{}`,
			err: "stamp fencedlease.io/fence: the JSON patch is not an array of operations: json: cannot unmarshal object into Go value of type []json.RawMessage"},
		{name: "CBOR apply patch", t: types.ApplyCBORPatchType, in: "\xa0",
			err: "stamp fencedlease.io/fence: a application/apply-patch+cbor patch cannot carry it: use a JSON, merge, strategic merge or (JSON or YAML) apply patch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := stampPatchData(tt.t, []byte(tt.in), 42)
			if tt.err != "" {
				g.Expect(err).To(MatchError(tt.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(tt.want))
		})
	}
}
