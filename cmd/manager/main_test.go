package main

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

func TestParseSecret(t *testing.T) {
	g := NewWithT(t)
	got, err := parseSecret("fencedlease-system/fencedlease-webhook-token")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(types.NamespacedName{Namespace: "fencedlease-system", Name: "fencedlease-webhook-token"}))
	for _, bad := range []string{"", "token", "/token", "ns/", "a/b/c"} {
		_, err := parseSecret(bad)
		g.Expect(err).To(MatchError(`--webhook-token-secret="` + bad + `": want namespace/name`))
	}
}
