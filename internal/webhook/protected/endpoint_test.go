package protected_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
	"github.com/fencedlease/fencedlease/internal/webhook/protected"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// webhookClient posts to the operator's webhook server as any pod of the
// cluster could: over TLS (it trusts the serving certificate, as an attacker
// may), with no client certificate, following no redirect.
func webhookClient(g Gomega) (*http.Client, string) {
	w := &env.WebhookInstallOptions
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(w.LocalServingCAData)).To(BeTrue())
	c := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
	return c, "https://" + net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort))
}

// pathToken is the token in the webhooks' paths, as an administrator reads it.
func (f *fixture) pathToken() string {
	s := &corev1.Secret{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: setup.DefaultNamespace, Name: setup.DefaultTokenSecret}, s)).To(Succeed())
	return string(s.Data["token"])
}

// review is an AdmissionReview as the API server would send it for an
// UPDATE of a ConfigMap in the fixture's namespace, by user, with the given
// resource.
func (f *fixture) review(uid, user string, resource schema.GroupVersionResource, kind, name string) []byte {
	obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"labels":{"fencedlease.io/protected-by":"db"}}}`, name, f.ns)
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(uid),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: kind},
			Resource:  metav1.GroupVersionResource{Group: resource.Group, Version: resource.Version, Resource: resource.Resource},
			Namespace: f.ns, Name: name, Operation: admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{Username: user},
		},
	}
	ar.Request.Object.Raw = []byte(obj)
	ar.Request.OldObject.Raw = []byte(obj)
	b, err := json.Marshal(ar)
	f.g.Expect(err).NotTo(HaveOccurred())
	return b
}

// post sends a body and returns the status and the response body.
func post(g Gomega, c *http.Client, url string, body []byte) (int, []byte) {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred(), "every request is answered")
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, out
}

// seriesCount counts the series of the metrics that a webhook request
// touches: the webhook's own and controller-runtime's webhook metrics (the
// operator's other metrics move with its controllers and clients).
func seriesCount(g Gomega) int {
	families, err := harness.Gather(metrics.Registry)
	g.Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, mf := range families {
		if strings.HasPrefix(mf.GetName(), "fencedlease_webhook_") || strings.HasPrefix(mf.GetName(), "controller_runtime_webhook_") {
			n += len(mf.GetMetric())
		}
	}
	g.Expect(n).To(BeNumerically(">", 0))
	return n
}

// heapAfterGC is the live heap of the test process (the operator runs in it).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestForgedReviews posts AdmissionReviews straight to the webhook port, as
// any pod can. Without the path token, every one is answered 404 unread: not
// decoded, not counted, no Event, even one that names a break-glass user.
// With the token (what only the API server has), reviews for resources that
// the webhook's configuration does not list are refused as bad_request under
// the fixed label value "other". Either way the number of metric series and the live
// heap stay flat however many arrive and whatever they carry.
func TestForgedReviews(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	f.g.Expect(f.operator.Create(f.ctx, f.configMap("state", "db", "", "v1"))).To(Succeed())
	c, base := webhookClient(f.g)
	token := f.pathToken()
	f.g.Expect(token).To(HaveLen(52))
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	breakGlass := f.review("forged-0", "bob", configmaps, "ConfigMap", "forged")

	// The path without a token, a wrong token, the other webhook's path
	// with this one's token shape, and the token on the wrong webhook.
	for _, path := range []string{
		protected.Path + "/",
		protected.Path + "/" + strings.Repeat("a", 52),
		protected.Path + "/" + token[:42],
		protected.Path + "/" + token + "/x",
		"/mutate-fencedlease-pod/" + strings.Repeat("a", 52),
		"/",
		"/metrics",
	} {
		code, body := post(f.g, c, base+path, breakGlass)
		f.g.Expect(code).To(Equal(http.StatusNotFound), "%s: %s", path, body)
		f.g.Expect(string(body)).To(Equal("404 page not found\n"))
	}
	// The bare path is redirected to the guarded subtree, unread.
	code, _ := post(f.g, c, base+protected.Path, breakGlass)
	f.g.Expect(code).To(Equal(http.StatusTemporaryRedirect))

	before := decisions(nil)
	series, heap := seriesCount(f.g), heapAfterGC()
	const n = 1000
	big := bytes.Repeat([]byte("x"), 64<<10)
	for i := range n {
		// Unauthenticated: every resource and user different, some big.
		body := f.review(fmt.Sprintf("forged-%d", i), "bob", schema.GroupVersionResource{Group: fmt.Sprintf("g%d.example.com", i), Version: "v1", Resource: fmt.Sprintf("r%d", i)}, fmt.Sprintf("K%d", i), fmt.Sprintf("forged-%d", i))
		if i%10 == 0 {
			body = append(body, big...)
		}
		code, _ := post(f.g, c, base+protected.Path+"/"+strings.Repeat("b", 52), body)
		f.g.Expect(code).To(Equal(http.StatusNotFound))
		// Authenticated, for resources the webhook never decides.
		code, resp := post(f.g, c, base+protected.Path+"/"+token,
			f.review(fmt.Sprintf("odd-%d", i), fmt.Sprintf("user-%d", i), schema.GroupVersionResource{Group: "", Version: "v1", Resource: fmt.Sprintf("r%d", i)}, "ConfigMap", fmt.Sprintf("odd-%d", i)))
		f.g.Expect(code).To(Equal(http.StatusOK))
		var ar admissionv1.AdmissionReview
		f.g.Expect(json.Unmarshal(resp, &ar)).To(Succeed())
		f.g.Expect(ar.Response.UID).To(BeEquivalentTo(fmt.Sprintf("odd-%d", i)))
		f.g.Expect(ar.Response.Allowed).To(BeFalse())
		f.g.Expect(ar.Response.Result.Code).To(BeEquivalentTo(http.StatusBadRequest))
		f.g.Expect(ar.Response.Result.Message).To(And(
			HavePrefix(`the fencing webhook decides writes to the resources its configuration lists (configmaps, `),
			HaveSuffix(fmt.Sprintf(`), not to resource "/v1, Resource=r%d" (kind "/v1, Kind=ConfigMap")`, i))))
	}
	f.g.Expect(seriesCount(f.g)).To(Equal(series), "forged reviews added metric series")
	f.g.Expect(decisions(nil)).To(Equal(before+n), "only the authenticated ones are decided")
	f.g.Expect(decisions(map[string]string{"resource": "other", "result": "error", "reason": "bad_request"})).To(BeNumerically(">=", n))
	// 1000 unread bodies (100 of them 64 KiB more) and 1000 refusals leave
	// nothing behind (the live heap moves by some 100 KiB either way); a
	// series, a body or a cache entry kept per request would take more
	// than 1 MiB.
	f.g.Expect(int64(heapAfterGC()) - int64(heap)).To(BeNumerically("<", 1<<20))

	// An authenticated body over the cap is refused unread.
	huge := append(f.review("huge", "bob", configmaps, "ConfigMap", "huge"), bytes.Repeat([]byte(" "), 7<<20)...)
	code, resp := post(f.g, c, base+protected.Path+"/"+token, huge)
	f.g.Expect(code).To(Equal(http.StatusOK))
	var ar admissionv1.AdmissionReview
	f.g.Expect(json.Unmarshal(resp, &ar)).To(Succeed())
	f.g.Expect(ar.Response.Allowed).To(BeFalse())
	f.g.Expect(ar.Response.Result.Message).To(Equal("http: request body too large"))

	// No forged review recorded anything: a real break-glass write records
	// its Event, and it is the only one (the recorder sends Events in order).
	carol := f.user("carol", breakGlassGroup)
	f.g.Expect(f.writeCM(carol, "state", "", "repaired by carol")).To(Succeed())
	sentinel := fencingv1alpha1.EventBreakGlass + ": " + fmt.Sprintf("Break-glass UPDATE of ConfigMap %s/state by user carol, without a fence", f.ns)
	f.g.Eventually(func() []string { return f.webhookEvents("db") }).WithTimeout(timeout).Should(ContainElement(sentinel))
	f.g.Expect(f.webhookEvents("db")).To(Equal([]string{sentinel}))
}

// TestTokenSecret: the path token is created once and read back by every
// replica, in a form the API server accepts in a webhook Service's path; a
// token of the earlier format (base64url, which such a path cannot carry)
// is replaced once, by one of two replicas that read it together; a Secret
// that holds something else is refused with the Secret's name and what is
// wrong, and left as it is.
func TestTokenSecret(t *testing.T) {
	f := newFixture(t)
	key := types.NamespacedName{Namespace: f.ns, Name: "token"}
	token, err := endpoint.EnsureToken(f.ctx, f.c, f.c, key)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(token).To(MatchRegexp(`^[a-z2-7]{52}$`))
	again, err := endpoint.EnsureToken(f.ctx, f.c, f.c, key)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(again).To(Equal(token))
	f.g.Expect(validation.IsDNS1123Subdomain(token)).To(BeEmpty(), "a webhook Service's path segment")

	legacy := &corev1.Secret{Data: map[string][]byte{endpoint.TokenKey: []byte("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")}}
	legacy.Namespace, legacy.Name = f.ns, "legacy"
	f.g.Expect(f.c.Create(f.ctx, legacy)).To(Succeed())
	replaced, errs := make([]string, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i := range replaced {
		wg.Go(func() {
			replaced[i], errs[i] = endpoint.EnsureToken(f.ctx, f.c, f.c, client.ObjectKeyFromObject(legacy))
		})
	}
	wg.Wait()
	f.g.Expect(errs).To(HaveEach(Succeed()))
	f.g.Expect(replaced[0]).To(MatchRegexp(`^[a-z2-7]{52}$`))
	f.g.Expect(replaced[1]).To(Equal(replaced[0]), "both replicas serve the one replacement")
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(legacy), legacy)).To(Succeed())
	f.g.Expect(string(legacy.Data[endpoint.TokenKey])).To(Equal(replaced[0]))

	bad := &corev1.Secret{Data: map[string][]byte{endpoint.TokenKey: []byte("guessable")}}
	bad.Namespace, bad.Name = f.ns, "bad"
	f.g.Expect(f.c.Create(f.ctx, bad)).To(Succeed())
	_, err = endpoint.EnsureToken(f.ctx, f.c, f.c, client.ObjectKeyFromObject(bad))
	f.g.Expect(err).To(MatchError(fmt.Sprintf(`webhook path token in Secret %s/bad: key "token" must hold 32 random bytes in unpadded lowercase base32 (52 characters); delete the Secret to have a new token generated`, f.ns)))
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(bad), bad)).To(Succeed())
	f.g.Expect(string(bad.Data[endpoint.TokenKey])).To(Equal("guessable"))
}
