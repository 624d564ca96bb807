package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func writeCert(t *testing.T, file string, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: notAfter.Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestExpiryCollector: the series follows the file as it is rotated, and is
// absent while the file is missing or holds no certificate.
func TestExpiryCollector(t *testing.T) {
	g := NewWithT(t)
	file := filepath.Join(t.TempDir(), CertName)
	reg := prometheus.NewPedanticRegistry()
	g.Expect(reg.Register(ExpiryCollector{Name: "webhook", File: file})).To(Succeed())
	g.Expect(testutil.CollectAndCount(reg)).To(Equal(0), "no file, no series")

	first := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	writeCert(t, file, first)
	want := `# HELP fencedlease_certificate_expiry_timestamp_seconds Unix time at which the webhook server's serving certificate (the one in its certificate directory) expires. Absent while there is no readable certificate.
# TYPE fencedlease_certificate_expiry_timestamp_seconds gauge
fencedlease_certificate_expiry_timestamp_seconds{certificate="webhook"} 1.8039024e+09
`
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(want))).To(Succeed())

	writeCert(t, file, first.Add(365*24*time.Hour))
	v := testutil.ToFloat64(ExpiryCollector{Name: "webhook", File: file})
	g.Expect(v).To(BeEquivalentTo(first.Add(365 * 24 * time.Hour).Unix()))

	g.Expect(os.WriteFile(file, []byte("not a certificate"), 0o600)).To(Succeed())
	g.Expect(testutil.CollectAndCount(reg)).To(Equal(0))
	_, err := NotAfter(file)
	g.Expect(err).To(MatchError("no PEM certificate in " + file))
}
