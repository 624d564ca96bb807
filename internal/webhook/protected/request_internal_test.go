package protected

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestOwnershipOnly(t *testing.T) {
	const base = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"ns","resourceVersion":"7",` +
		`"labels":{"fencedlease.io/protected-by":"db"},"annotations":{"fencedlease.io/fence":"42"}`
	owned := base + `,"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"u1"}],"finalizers":["x"]},"data":{"k":"v"}}`
	tests := []struct {
		name     string
		old, new string
		want     bool
	}{
		{"owner reference and finalizer removed", owned, base + `,"resourceVersion":"8"},"data":{"k":"v"}}`, true},
		{"nothing changed", owned, owned, true},
		{"data changed too", owned, base + `},"data":{"k":"other"}}`, false},
		{"label changed too", owned, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"ns","labels":{}` +
			`,"annotations":{"fencedlease.io/fence":"42"}},"data":{"k":"v"}}`, false},
		{"fence annotation changed too", owned, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"ns",` +
			`"labels":{"fencedlease.io/protected-by":"db"},"annotations":{"fencedlease.io/fence":"99"}},"data":{"k":"v"}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ownershipOnly([]byte(tt.old), []byte(tt.new))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
	_, err := ownershipOnly([]byte(`{`), []byte(`{}`))
	NewWithT(t).Expect(err).To(HaveOccurred())
}
