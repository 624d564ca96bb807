package endpoint

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

const token = "aaaqeayeaudaocajbifqydiob4ibceqtcqkrmfyydenbwha5dypq" // 32 bytes 0..31

var bases = []string{"/validate-fencedlease-protected", "/mutate-fencedlease-pod"}

func TestTokenPath(t *testing.T) {
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"/validate-fencedlease-protected", "/validate-fencedlease-protected/" + token, true},
		{"/validate-fencedlease-protected/" + token, "/validate-fencedlease-protected/" + token, true},
		{"/validate-fencedlease-protected/an-older-token", "/validate-fencedlease-protected/" + token, true},
		{"/mutate-fencedlease-pod", "/mutate-fencedlease-pod/" + token, true},
		{"//mutate-fencedlease-pod", "/mutate-fencedlease-pod/" + token, true},
		{"mutate-fencedlease-pod/", "/mutate-fencedlease-pod/" + token, true},
		{"/validate-fencedlease-protected/a/b", "", false},
		{"/validate-fencedlease-protectedx", "", false},
		{"/someone-elses-webhook", "", false},
		{"/", "", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := TokenPath(tc.path, bases, token)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestWithToken(t *testing.T) {
	g := NewWithT(t)
	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: "fencedlease-system", Name: "webhook-service", Path: ptr.To("/validate-fencedlease-protected"), Port: ptr.To[int32](443)}}
	changed, err := withToken(&svc, bases, token)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(*svc.Service.Path).To(Equal("/validate-fencedlease-protected/" + token))
	changed, err = withToken(&svc, bases, token)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "publishing twice changes nothing")

	// envtest (and out-of-cluster installs) call a URL.
	u := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:35443//mutate-fencedlease-pod")}
	changed, err = withToken(&u, bases, token)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(*u.URL).To(Equal("https://127.0.0.1:35443/mutate-fencedlease-pod/" + token))

	// Someone else's webhook, and a service without a path.
	other := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:35443/test-add-sidecar")}
	bare := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "x"}}
	for _, cc := range []*admissionregistrationv1.WebhookClientConfig{&other, &bare} {
		changed, err = withToken(cc, bases, token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(changed).To(BeFalse())
	}
	g.Expect(*other.URL).To(Equal("https://127.0.0.1:35443/test-add-sidecar"))
	g.Expect(bare.Service.Path).To(BeNil())

	_, err = withToken(&admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://[::1")}, bases, token)
	g.Expect(err).To(MatchError(`clientConfig.url: parse "https://[::1": missing ']' in host`))
}

func TestValidToken(t *testing.T) {
	g := NewWithT(t)
	g.Expect(validToken(token)).To(Succeed())
	const want = "must hold 32 random bytes in unpadded lowercase base32 (52 characters)"
	// Too short, too long, padded, upper case, not base32, its last
	// character's unused bits set.
	for _, bad := range []string{"short", token + "a", token[:51] + "=", strings.ToUpper(token), strings.Repeat("/", 52), token[:51] + "r"} {
		g.Expect(validToken(bad)).To(MatchError(want), bad)
	}
	g.Expect(validToken("")).To(MatchError("is missing or empty"))
}

// TestGuard: only POSTs to base/<token> reach the handler, with their body
// capped; anything else is answered without a byte of it read.
func TestGuard(t *testing.T) {
	e := &Endpoint{opts: Options{MaxRequestBytes: 16}, token: token}
	reached := 0
	var read []byte
	var readErr error
	h := e.guard("/validate-fencedlease-protected", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		read, readErr = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	body := &countingReader{r: strings.NewReader("0123456789")}
	serve := func(method, path string, b io.Reader) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "https://webhook"+path, b))
		return rec.Code
	}
	for _, path := range []string{
		"/validate-fencedlease-protected/",
		"/validate-fencedlease-protected/" + token[:42],
		"/validate-fencedlease-protected/" + token[:42] + "g",
		"/validate-fencedlease-protected/" + token + "/",
		"/validate-fencedlease-protected/" + token + "x",
		"/mutate-fencedlease-pod/" + token,
	} {
		NewWithT(t).Expect(serve(http.MethodPost, path, body)).To(Equal(http.StatusNotFound), path)
	}
	g := NewWithT(t)
	g.Expect(body.n).To(BeZero(), "a request on a wrong path must not be read")
	g.Expect(serve(http.MethodGet, "/validate-fencedlease-protected/"+token, nil)).To(Equal(http.StatusMethodNotAllowed))
	g.Expect(reached).To(BeZero())

	g.Expect(serve(http.MethodPost, "/validate-fencedlease-protected/"+token, strings.NewReader("{}"))).To(Equal(http.StatusOK))
	g.Expect(reached).To(Equal(1))
	g.Expect(string(read)).To(Equal("{}"))
	serve(http.MethodPost, "/validate-fencedlease-protected/"+token, strings.NewReader(strings.Repeat("x", 17)))
	g.Expect(readErr).To(MatchError("http: request body too large"))
	g.Expect(read).To(HaveLen(16))
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
