package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const dnsName = "hooks.ops.svc"

var testOpts = Options{
	Namespace: "ops", SecretName: "cert", ServiceName: "hooks", CertDir: "unused",
	ValidatingWebhookConfigurations: []string{"fencing"},
}

func newCA(t *testing.T) *rotator.KeyPairArtifacts {
	t.Helper()
	now := time.Now()
	ca, err := (&rotator.CertRotator{CAName: "test-ca", CAOrganization: "test"}).CreateCACert(now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue returns a serving certificate and key for name, signed by ca.
func issue(t *testing.T, ca *rotator.KeyPairArtifacts, name string) (crt, key []byte) {
	t.Helper()
	r := &rotator.CertRotator{DNSName: name, ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	crt, key, err := r.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return crt, key
}

// pair is a new CA and a serving certificate it signed for name.
func pair(t *testing.T, name string) (caPEM, crt, key []byte) {
	ca := newCA(t)
	crt, key = issue(t, ca, name)
	return ca.CertPEM, crt, key
}

// serve runs a TLS server that presents the pair and returns its address.
func serve(t *testing.T, crt, key []byte) string {
	t.Helper()
	kp, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	return l.Addr().String()
}

func webhookConfig(caBundle []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fencing"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "protected.example.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: caBundle},
		}},
	}
}

func TestReadyChecker(t *testing.T) {
	authority := newCA(t)
	ca := authority.CertPEM
	crt, key := issue(t, authority, dnsName)
	otherCA, _, _ := pair(t, dnsName)
	wrongNameCrt, wrongNameKey := issue(t, authority, "elsewhere.ops.svc")
	good := serve(t, crt, key)
	wrongName := serve(t, wrongNameCrt, wrongNameKey)
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}()

	for _, tc := range []struct {
		name    string
		loaded  bool
		addr    string
		config  *admissionregistrationv1.ValidatingWebhookConfiguration
		wantErr string
	}{
		{"no certificate loaded yet", false, good, webhookConfig(ca), "no serving certificate loaded yet from Secret ops/cert"},
		{"webhook server not serving", true, closed, webhookConfig(ca), "webhook server at " + closed + " is not serving: "},
		{"webhook configuration missing", true, good, nil, `get ValidatingWebhookConfiguration fencing: validatingwebhookconfigurations.admissionregistration.k8s.io "fencing" not found`},
		{"no CA bundle injected yet", true, good, webhookConfig(nil), "ValidatingWebhookConfiguration fencing, webhook protected.example.io has no CA bundle yet"},
		{"CA bundle of another CA", true, good, webhookConfig(otherCA), "ValidatingWebhookConfiguration fencing, webhook protected.example.io: the serving certificate is not trusted by its CA bundle: x509: certificate signed by unknown authority"},
		{"CA bundle that is no PEM", true, good, webhookConfig([]byte("garbage")), "ValidatingWebhookConfiguration fencing, webhook protected.example.io: the serving certificate is not trusted by its CA bundle: the CA bundle holds no PEM certificate"},
		{"certificate for another name", true, wrongName, webhookConfig(ca), "ValidatingWebhookConfiguration fencing, webhook protected.example.io: the serving certificate is not trusted by its CA bundle: x509: certificate is valid for elsewhere.ops.svc, not hooks.ops.svc"},
		{"ready", true, good, webhookConfig(ca), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := New(testOpts)
			g.Expect(err).NotTo(HaveOccurred())
			b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
			if tc.config != nil {
				b = b.WithObjects(tc.config)
			}
			c.reader = b.Build()
			if tc.loaded {
				close(c.loaded)
			}
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "/readyz", nil)
			err = c.ReadyChecker(tc.addr)(req)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(HavePrefix(tc.wantErr))
		})
	}
}

func TestOptionsNameWhatIsMissing(t *testing.T) {
	g := NewWithT(t)
	_, err := New(Options{SecretName: "cert"})
	g.Expect(err).To(MatchError("serving certificate from Secret /cert: missing [the operator's namespace the webhook Service the certificate directory the webhook configurations]"))
	c, err := New(testOpts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.opts.DNSName()).To(Equal(dnsName))
}

func TestLoadWritesOnlyValidPairs(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	opts := testOpts
	opts.CertDir = dir
	c, err := New(opts)
	g.Expect(err).NotTo(HaveOccurred())
	secret := func(crt, key []byte) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{CertName: crt, KeyName: key}}
	}
	isOpen := func() bool {
		select {
		case <-c.loaded:
			return true
		default:
			return false
		}
	}
	_, crt1, key1 := pair(t, dnsName)
	_, crt2, key2 := pair(t, dnsName)

	c.load(logr.Discard(), secret(nil, nil))
	g.Expect(isOpen()).To(BeFalse(), "an empty Secret opens nothing")
	c.load(logr.Discard(), secret(crt1, key2))
	g.Expect(isOpen()).To(BeFalse(), "a certificate with another one's key is no pair")
	g.Expect(filepath.Join(dir, CertName)).NotTo(BeAnExistingFile())

	c.load(logr.Discard(), secret(crt1, key1))
	g.Expect(isOpen()).To(BeTrue())
	g.Expect(os.ReadFile(filepath.Join(dir, CertName))).To(Equal(crt1))
	g.Expect(os.ReadFile(filepath.Join(dir, KeyName))).To(Equal(key1))

	// A broken pair keeps the current one.
	c.load(logr.Discard(), secret(crt2, key1))
	g.Expect(os.ReadFile(filepath.Join(dir, CertName))).To(Equal(crt1))

	c.load(logr.Discard(), secret(crt2, key2))
	g.Expect(os.ReadFile(filepath.Join(dir, CertName))).To(Equal(crt2))
	g.Expect(os.ReadFile(filepath.Join(dir, KeyName))).To(Equal(key2))
	// One pair directory is left: the old one is gone.
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	var pairs []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..pair-") {
			pairs = append(pairs, e.Name())
		}
	}
	g.Expect(pairs).To(HaveLen(1))

	changed, err := writePair(dir, crt2, key2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "the same pair again changes nothing")
}
