package fence_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

type object struct{ annotations map[string]string }

func (o *object) GetAnnotations() map[string]string  { return o.annotations }
func (o *object) SetAnnotations(a map[string]string) { o.annotations = a }

func TestStamp(t *testing.T) {
	holder := fence.Token{Role: fence.RoleHolder, Fence: 42, Lease: "db"}
	tests := []struct {
		name    string
		before  map[string]string
		tok     fence.Token
		want    map[string]string
		wantErr string
	}{
		{name: "no annotations", tok: holder, want: map[string]string{"fencedlease.io/fence": "42"}},
		{name: "keeps others", before: map[string]string{"a": "b"}, tok: holder, want: map[string]string{"a": "b", "fencedlease.io/fence": "42"}},
		{name: "replaces old fence", before: map[string]string{"fencedlease.io/fence": "41"}, tok: holder, want: map[string]string{"fencedlease.io/fence": "42"}},
		{
			name: "standby", before: map[string]string{"a": "b"}, tok: fence.Token{Role: fence.RoleStandby, Lease: "db"},
			want: map[string]string{"a": "b"}, wantErr: `stamp fencedlease.io/fence: not the holder (token: standby of "db")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			shared := tt.before
			var snapshot map[string]string
			if shared != nil {
				snapshot = map[string]string{}
				for k, v := range shared {
					snapshot[k] = v
				}
			}
			obj := &object{annotations: shared}
			err := fence.Stamp(obj, tt.tok)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(tt.wantErr))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(obj.annotations).To(Equal(tt.want))
			g.Expect(shared).To(Equal(snapshot), "the caller's map must not be modified")
		})
	}
}
