package storage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/internal/gateway"
)

// TestPathAliases: a request path names one object, decided once (findings
// 1 and 7). Tenant A (namespace A, keys a/) and tenant B (namespace B, keys
// b/) share a bucket, and A's namespace has a second FencedLease for
// a/audit/. Every path that would reach another tenant's object, or one
// object under another lock key (a/../b/report, a/x/../audit/log, a//x,
// a/./x, encoded / and .), is refused with 400 and a message that names it,
// and changes nothing: A's holder cannot write or delete B's report, A's
// standby cannot read it, a copy cannot take it, a listing cannot climb out
// of A's prefix. Then a generated set of aliases of a/x, sent to versitygw
// through the gateway: each is refused, or writes a/x and nothing else.
func TestPathAliases(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	nsA, nsB := namespace(t, "tenanta"), namespace(t, "tenantb")
	bucket := nsA
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	a := newTenant(t, nsA, "a", nil)
	audit := newTenant(t, nsA, "audit", nil)
	b := newTenant(t, nsB, "b", nil)
	gw := startGateway(t, []gateway.Route{
		{Bucket: bucket, Prefix: "a/", Namespace: nsA, FencedLease: "a"},
		{Bucket: bucket, Prefix: "a/audit/", Namespace: nsA, FencedLease: "audit"},
		{Bucket: bucket, Prefix: "b/", Namespace: nsB, FencedLease: "b"},
	}, nil)
	url := func(p string) string { return gw.URL + "/" + bucket + "/" + p }
	for key, tn := range map[string]*tenant{"b/report": b, "a/audit/log": audit, "a/x": a} {
		status, _, body := raw(g, http.MethodPut, url(key), tn.holderHeaders(), "by "+tn.name)
		g.Expect(status).To(Equal(http.StatusOK), body)
	}
	before := func() []string {
		var out []string
		for _, k := range []string{"a/x", "a/audit/log", "b/report"} {
			c, _ := storedObject(ctx, bucket, k)
			out = append(out, c)
		}
		return append(out, storedKeys(ctx, g, bucket)...)
	}
	unchanged := before()
	g.Expect(unchanged).To(Equal([]string{"by a", "by audit", "by b", "a/audit/log", "a/x", "b/report"}))

	refusal := func(path, why string) string {
		return fmt.Sprintf("path %q refused: %s; a path must name its object as stored, without \".\" or \"..\" segments, empty segments or an encoded / or .", "/"+bucket+"/"+path, why)
	}
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		code, message      string
	}{
		{"A's holder writes B's report", http.MethodPut, "a/../b/report", a.holderHeaders(), "InvalidURI", refusal("a/../b/report", `it has a ".." segment`)},
		{"A's holder deletes B's report", http.MethodDelete, "a/../b/report", a.holderHeaders(), "InvalidURI", refusal("a/../b/report", `it has a ".." segment`)},
		{"A's standby reads B's report", http.MethodGet, "a/../b/report", as(a.sTok, ""), "InvalidURI", refusal("a/../b/report", `it has a ".." segment`)},
		{"encoded dots", http.MethodPut, "a/%2e%2e/b/report", a.holderHeaders(), "InvalidURI", refusal("a/%2e%2e/b/report", `it encodes a "." as %2e: send / and . unencoded`)},
		{"encoded slash", http.MethodPut, "a%2F..%2Fb/report", a.holderHeaders(), "InvalidURI", refusal("a%2F..%2Fb/report", `it encodes a "/" as %2F: send / and . unencoded`)},
		{"A's holder copies B's report", http.MethodPut, "a/stolen", a.holderHeaders("X-Amz-Copy-Source", bucket+"/a/../b/report"), "InvalidArgument",
			fmt.Sprintf(`x-amz-copy-source %q refused: it has a ".." segment`, bucket+"/a/../b/report")},
		{"A's holder writes the audit log", http.MethodPut, "a/x/../audit/log", a.holderHeaders(), "InvalidURI", refusal("a/x/../audit/log", `it has a ".." segment`)},
		{"a//x", http.MethodPut, "a//x", a.holderHeaders(), "InvalidURI", refusal("a//x", "it has an empty segment (// or a trailing /)")},
		{"a/./x", http.MethodPut, "a/./x", a.holderHeaders(), "InvalidURI", refusal("a/./x", `it has a "." segment`)},
		{"A lists B's keys", http.MethodGet, "?list-type=2&prefix=a/../b/", as(a.sTok, ""), "InvalidArgument", `listing prefix "a/../b/" refused: it has a ".." segment`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			target := url(tc.path)
			if strings.HasPrefix(tc.path, "?") {
				target = gw.URL + "/" + bucket + tc.path
			}
			status, _, body := raw(g, tc.method, target, tc.header, "by a, stale")
			g.Expect(status).To(Equal(http.StatusBadRequest), body)
			if tc.method != http.MethodHead {
				e := errorOf(g, body)
				g.Expect(e.Code).To(Equal(tc.code))
				g.Expect(e.Message).To(Equal(tc.message))
			}
			g.Expect(before()).To(Equal(unchanged), "nothing changed")
		})
	}

	// A generated set of aliases of a/x, through the gateway to versitygw:
	// each is refused (nothing changes), or it writes a/x and no other key.
	r := rand.New(rand.NewPCG(7, 44))
	accepted := 0
	for i, p := range pathAliases(r, "a/x", 40) {
		content := fmt.Sprintf("alias %d", i)
		prev, _ := storedObject(ctx, bucket, "a/x")
		status, _, body := raw(g, http.MethodPut, gw.URL+"/"+bucket+p, a.holderHeaders(), content)
		now, _ := storedObject(ctx, bucket, "a/x")
		switch status {
		case http.StatusOK:
			accepted++
			g.Expect(now).To(Equal(content), "%s wrote a/x", p)
		case http.StatusBadRequest:
			g.Expect(errorOf(g, body).Code).To(Equal("InvalidURI"), p)
			g.Expect(now).To(Equal(prev), "%s changed nothing", p)
		default:
			t.Fatalf("%s: %d %s", p, status, body)
		}
		g.Expect(storedKeys(ctx, g, bucket)).To(Equal([]string{"a/audit/log", "a/x", "b/report"}), p)
	}
	t.Logf("of %d aliases of a/x, %d accepted", 40, accepted)
	g.Expect(accepted).To(BeNumerically(">", 0))
	c, _ := storedObject(ctx, bucket, "b/report")
	g.Expect(c).To(Equal("by b"))
}

// pathAliases makes n request paths (after the bucket) that a store
// resolving paths would take to key: "." and ".." segments, doubled
// slashes, escapes of any byte (encoded / and . included), in either case.
func pathAliases(r *rand.Rand, key string, n int) []string {
	var out []string
	for range n {
		var b strings.Builder
		for _, s := range strings.Split(key, "/") {
			b.WriteByte('/')
			switch r.IntN(7) {
			case 0:
				b.WriteString("./")
			case 1:
				b.WriteString("z/../")
			case 2:
				b.WriteByte('/')
			case 3:
				b.WriteString("%2E/")
			}
			for j := 0; j < len(s); j++ {
				switch r.IntN(5) {
				case 0:
					fmt.Fprintf(&b, "%%%02X", s[j])
				case 1:
					fmt.Fprintf(&b, "%%%02x", s[j])
				default:
					b.WriteByte(s[j])
				}
			}
		}
		out = append(out, b.String())
	}
	return out
}
