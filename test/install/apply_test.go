package install_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	timeout = 60 * time.Second
	poll    = 100 * time.Millisecond
)

// ensureNamespace creates a namespace unless it exists.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// stubCRDs installs the CRDs of cert-manager and the Prometheus Operator that
// the chart's options use, with open schemas: enough for the API server to
// accept the chart's objects of those kinds, not a check of their fields.
func stubCRDs(t *testing.T) {
	t.Helper()
	for _, c := range []struct{ group, kind, plural string }{
		{"cert-manager.io", "Certificate", "certificates"},
		{"cert-manager.io", "Issuer", "issuers"},
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
	} {
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: c.plural + "." + c.group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: c.group,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: c.kind, ListKind: c.kind + "List", Plural: c.plural, Singular: strings.ToLower(c.kind)},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true),
					}},
				}},
			},
		}
		if err := admin.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create CRD %s: %v", crd.Name, err)
		}
	}
	g := NewWithT(t)
	g.Eventually(func() error {
		_, err := kubectl(t, "", "get", "certificates.cert-manager.io,issuers.cert-manager.io,servicemonitors.monitoring.coreos.com", "-A")
		return err
	}, timeout, poll).Should(Succeed())
}

// TestServerSideDryRun: the API server accepts every object of both install
// paths, as kubectl apply --server-side would apply them.
func TestServerSideDryRun(t *testing.T) {
	ensureNamespace(t, defaultNamespace)
	ensureNamespace(t, "platform")
	stubCRDs(t)
	for name, manifests := range map[string]string{
		"chart":                    renderChart(t, defaultRelease, defaultNamespace),
		"chart with custom values": renderChart(t, defaultRelease, "platform", "-f", customValues),
		"config/default":           renderKustomize(t),
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := kubectl(t, manifests, "apply", "--server-side", "--dry-run=server", "--field-manager=install-test", "-f", "-")
			g.Expect(err).NotTo(HaveOccurred())
			lines := strings.Split(strings.TrimSpace(out), "\n")
			g.Expect(lines).To(HaveLen(len(decode(t, manifests))))
			for _, l := range lines {
				g.Expect(l).To(HaveSuffix("serverside-applied (server dry run)"))
			}
		})
	}
}

// manifestObjects are the objects of a release, from helm get manifest.
func manifestObjects(t *testing.T, release, ns string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, "get", "manifest", release, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func get(o *unstructured.Unstructured) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.GroupVersionKind())
	return admin.Get(context.Background(), client.ObjectKeyFromObject(o), u)
}

// TestHelmInstallUpgradeUninstall: helm install creates the release's
// objects (the Deployment's pods never start: no kubelet runs), a bad value
// creates nothing, helm upgrade keeps the certificate and the injected CA
// bundles, and helm uninstall removes everything it created but the CRD,
// which helm never deletes.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const release, ns = "fl-helm", "fl-helm-system"

	_, err := helm(t, "install", release, chartDir, "--namespace", ns, "--create-namespace", "--set", "replicaCount=0")
	g.Expect(err).To(MatchError(ContainSubstring("- at '/replicaCount': minimum: got 0, want 1\n")))
	_, err = helm(t, "status", release, "--namespace", ns)
	g.Expect(err).To(MatchError(ContainSubstring("release: not found")))

	out, err := helm(t, "install", release, chartDir, "--namespace", ns, "--create-namespace")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("STATUS: deployed"))
	g.Expect(out).To(ContainSubstring("kubectl -n fl-helm-system rollout status deployment/fl-helm-fencedlease-controller-manager"), "NOTES.txt tells what to do next")
	objs := manifestObjects(t, release, ns)
	g.Expect(len(objs)).To(BeNumerically(">=", 15))
	for _, o := range objs {
		g.Expect(get(o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: "fencedleases.fencing.fencedlease.io"}, crd)).To(Succeed())

	// What the operator would have written: its certificate and the CA
	// bundles.
	secret := &corev1.Secret{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fl-helm-fencedlease-webhook-cert"}, secret)).To(Succeed())
	secret.Data = map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key"), "ca.crt": []byte("ca")}
	g.Expect(admin.Update(ctx, secret)).To(Succeed())
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: "fl-helm-fencedlease-fencing"}, vwc)).To(Succeed())
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = []byte("injected CA")
	}
	g.Expect(admin.Update(ctx, vwc)).To(Succeed())

	_, err = helm(t, "upgrade", release, chartDir, "--namespace", ns, "--reuse-values", "--set", "webhooks.excludeNamespaces={legacy}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
	g.Expect(secret.Data).To(HaveKeyWithValue("tls.crt", []byte("cert")), "helm upgrade keeps the operator's certificate")
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(vwc), vwc)).To(Succeed())
	for _, h := range vwc.Webhooks {
		g.Expect(h.ClientConfig.CABundle).To(Equal([]byte("injected CA")), "helm upgrade keeps the injected CA bundle")
		g.Expect(h.NamespaceSelector.MatchExpressions[0].Values).To(ContainElement("legacy"), "helm upgrade applied the new value")
	}

	out, err = helm(t, "uninstall", release, "--namespace", ns, "--wait")
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, o := range objs {
		g.Eventually(func() error { return get(o) }, timeout, poll).Should(Satisfy(apierrors.IsNotFound), "%s %s is left behind", o.GetKind(), o.GetName())
	}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: "fencedleases.fencing.fencedlease.io"}, crd)).To(Succeed(), "helm never deletes the CRDs in crds/, so that FencedLeases survive; make uninstall does")
}
