package fencedcontroller

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"

	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
)

// TestOptionsDefaults: the FencedLease from the token files, the namespace
// from $POD_NAMESPACE, the Session's API from the rest.Config (the token
// file read again for every request), the field manager from the user
// agent.
func TestOptionsDefaults(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	files, err := fencetest.NewKubeletWriter(filepath.Join(dir, "fencedlease"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files.Standby("widget-controller")).To(Succeed())
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	g.Expect(os.WriteFile(tokenFile, []byte("one\n"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(caFile, []byte("CA"), 0o600)).To(Succeed())
	t.Setenv("POD_NAMESPACE", "team-a")
	cfg := &rest.Config{Host: "10.0.0.1:443", BearerTokenFile: tokenFile, UserAgent: "widget-controller/v1.2 (linux/amd64)",
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}

	o, err := Options{TokenDir: files.Dir()}.withDefaults(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.Lease).To(Equal("widget-controller"))
	g.Expect(o.Namespace).To(Equal("team-a"))
	g.Expect(o.FieldManager).To(Equal("widget-controller"))
	g.Expect(o.StopLead).To(Equal(DefaultStopLead))
	g.Expect(o.API.Host).To(Equal("https://10.0.0.1:443"))
	g.Expect(string(o.API.CAData)).To(Equal("CA"))
	tok, err := o.API.Token()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tok).To(Equal("one"))
	g.Expect(os.WriteFile(tokenFile, []byte("two"), 0o600)).To(Succeed())
	tok, err = o.API.Token()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tok).To(Equal("two"), "a rotated token is read again")

	_, err = Options{TokenDir: filepath.Join(dir, "absent")}.withDefaults(cfg)
	g.Expect(err).To(MatchError(ContainSubstring("the FencedLease: set Options.Lease, or mount the token files: ")))
	_, err = Options{Lease: "x"}.withDefaults(&rest.Config{Host: "h", BearerToken: "t", Impersonate: rest.ImpersonationConfig{UserName: "bob"}})
	g.Expect(err).To(MatchError("the rest.Config impersonates another user: the pod must renew its grant and write as itself"))
	g.Expect(userAgentManager("")).NotTo(BeEmpty())
}
