package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

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

func TestCheckFlags(t *testing.T) {
	g := NewWithT(t)
	f := flags{tokenSecret: "ns/token", scaleGuardRole: "guard", scaleGuardAccount: "ns/guard"}
	g.Expect(checkFlags(&f)).To(Succeed())
	g.Expect(f.webhook.TokenSecret).To(Equal(types.NamespacedName{Namespace: "ns", Name: "token"}))
	g.Expect(f.webhook.ScaleGuard).NotTo(BeNil())
	g.Expect(checkFlags(&flags{tokenSecret: "token"})).To(MatchError(`--webhook-token-secret="token": want namespace/name`))
	g.Expect(checkFlags(&flags{tokenSecret: "ns/token", scaleGuardRole: "guard"})).
		To(MatchError(`--scale-guard-role="guard" --scale-guard-service-account="": want both, the second as namespace/name`))
	g.Expect(checkFlags(&flags{tokenSecret: "ns/token", statusRenewalInterval: -time.Second})).
		To(MatchError("--status-renewal-interval=-1s: want 0 or more"))
}

// TestWebhookCertDir: the webhook server's certificate directory is the
// flag's, else controller-runtime's default.
func TestWebhookCertDir(t *testing.T) {
	g := NewWithT(t)
	ws, err := newWebhookServing(&flags{enableWebhooks: true}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ws.serving).To(BeNil())
	g.Expect(ws.certDir).To(Equal(filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")))
	ws, err = newWebhookServing(&flags{enableWebhooks: true, webhookCertDir: "/certs"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ws.certDir).To(Equal("/certs"))
}
