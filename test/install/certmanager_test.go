package install_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestOperatorWithCertManagerCertificate: with certManager.enabled the
// operator neither provisions nor injects; the test does what cert-manager
// and its CA injector would (a CA-signed certificate in the Secret, the CA in
// the annotated webhook configurations). The operator, with the narrower
// RBAC of that mode, must load the certificate, become Ready and serve
// admission; it must not be able to write other Secrets or other webhook
// configurations. Its own two it still updates, to write the webhooks' path
// token into them.
func TestOperatorWithCertManagerCertificate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "fl-certmanager"
	stubCRDs(t)
	out, err := helm(t, "install", defaultRelease, chartDir, "--namespace", ns, "--create-namespace", "--set", "certManager.enabled=true")
	g.Expect(err).NotTo(HaveOccurred(), out)
	t.Cleanup(func() {
		if out, err := helm(t, "uninstall", defaultRelease, "--namespace", ns, "--wait"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	dep := &appsv1.Deployment{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fencedlease-controller-manager"}, dep)).To(Succeed())
	c := dep.Spec.Template.Spec.Containers[0]
	g.Expect(args(c, "webhook-cert-rotation")).To(Equal([]string{"false"}))

	// cert-manager's part: the Certificate's Secret, and the CA injected
	// where the webhook configurations' annotation asks.
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"})
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fencedlease-serving-cert"}, cert)).To(Succeed())
	dnsNames, _, err := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dnsNames).To(ContainElement("fencedlease-webhook-service." + ns + ".svc"))
	now := time.Now()
	r := &rotator.CertRotator{CAName: "issuer-ca", CAOrganization: "test", DNSName: dnsNames[0], ExtraDNSNames: append(dnsNames[1:], "localhost"),
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	ca, err := r.CreateCACert(now.Add(-time.Hour), now.Add(24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	crt, key, err := r.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(admin.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: args(c, "webhook-cert-secret")[0]},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM},
	})).To(Succeed())
	// A Secret the operator must not see.
	g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"},
		StringData: map[string]string{"k": "v"}})).To(Succeed())

	webhookPort := freePort(t)
	pointWebhooksAt(t, c, fmt.Sprintf("localhost:%d", webhookPort))
	inject := func(name string, mutating bool) {
		var obj client.Object
		if mutating {
			w := &admissionregistrationv1.MutatingWebhookConfiguration{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, w)).To(Succeed())
			g.Expect(w.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", ns+"/fencedlease-serving-cert"))
			for i := range w.Webhooks {
				w.Webhooks[i].ClientConfig.CABundle = ca.CertPEM
			}
			obj = w
		} else {
			w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, w)).To(Succeed())
			g.Expect(w.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", ns+"/fencedlease-serving-cert"))
			for i := range w.Webhooks {
				w.Webhooks[i].ClientConfig.CABundle = ca.CertPEM
			}
			obj = w
		}
		g.Expect(admin.Update(ctx, obj)).To(Succeed())
	}

	op := startOperator(t, dep, webhookPort)
	// Not Ready while the CA injector has not run: the API server could
	// not call it.
	g.Eventually(func() string {
		g.Expect(op.ready()).NotTo(Succeed())
		return op.log.String()
	}).WithTimeout(timeout).WithPolling(poll).Should(ContainSubstring(
		`"reason":"ValidatingWebhookConfiguration fencedlease-fencing, webhook protected.fencedlease.io has no CA bundle yet"`))
	for _, n := range args(c, "validating-webhook-configuration") {
		inject(n, false)
	}
	for _, n := range args(c, "mutating-webhook-configuration") {
		inject(n, true)
	}
	g.Eventually(op.ready).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	leaf, err := op.servedCertificate()
	g.Expect(err).NotTo(HaveOccurred())
	block, _ := pem.Decode(crt)
	g.Expect(leaf.Raw).To(Equal(block.Bytes), "the operator serves the certificate from the Secret")

	wns, err := testenv.Namespace(ctx, admin, "cm-workload")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error { return admissionReached(ctx, wns) }).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// Nothing was injected by the operator: the bundles are still the
	// issuer's.
	for _, b := range caBundles(t, c) {
		g.Expect(b).To(Equal(ca.CertPEM))
	}

	cs, err := kubernetes.NewForConfig(op.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range []struct {
		verb, group, resource, name, ns string
		allowed                         bool
	}{
		{"get", "", "secrets", "fencedlease-webhook-cert", ns, true},
		{"get", "", "secrets", "unrelated", ns, false},
		{"update", "", "secrets", "fencedlease-webhook-cert", ns, false},
		{"get", "", "secrets", "fencedlease-webhook-token", ns, true},
		{"update", "", "secrets", "fencedlease-webhook-token", ns, true}, // replacing a token of the earlier format
		{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "fencedlease-fencing", "", true},
		{"update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "fencedlease-pod-injector", "", true},
		{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "another-webhook", "", false},
		{"update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "another-webhook", "", false},
		{"list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", false},
		{"get", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "fencedlease-fencing", "", true},
	} {
		res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Name: a.name,
			}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status.Allowed).To(Equal(a.allowed), "%s %s/%s %q in %q", a.verb, a.group, a.resource, a.name, a.ns)
	}
	g.Expect(op.running()).To(BeTrue())
	g.Expect(op.log.String()).NotTo(ContainSubstring("forbidden"))
}
