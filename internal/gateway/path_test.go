package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// resolve is what a store that resolves paths on a file system makes of a
// request path: every escape decoded (%2F and %2E included), then "." and
// empty segments dropped and ".." taken back. It is the object the request
// reaches there.
func resolve(escaped string) (bucket, key string, ok bool) {
	decoded, err := url.PathUnescape(escaped)
	if err != nil {
		return "", "", false
	}
	var out []string
	for _, s := range strings.Split(decoded, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "", "", true
	}
	return out[0], strings.Join(out[1:], "/"), true
}

// aliases makes request paths for /bucket/key that a store resolving paths
// takes to the same object: the findings' own and random ones.
func aliases(r *rand.Rand, bucket, key string, n int) []string {
	out := []string{
		"/" + bucket + "/" + key,
		"/" + bucket + "/./" + key,
		"/" + bucket + "//" + key,
		"/" + bucket + "/x/../" + key,
		"/" + bucket + "/" + strings.Replace(key, "/", "//", 1),
		"/" + bucket + "/" + strings.Replace(key, "/", "/./", 1),
		"/" + bucket + "/" + strings.Replace(key, "/", "%2F", 1),
		"/" + bucket + "/" + strings.Replace(key, "/", "%2f", 1),
		"/" + bucket + "/%2E/" + key,
		"/" + bucket + "/%2e%2e/" + bucket + "/" + key,
		"/" + bucket + "/" + key + "/",
	}
	for range n {
		segs := strings.Split(bucket+"/"+key, "/")
		var b strings.Builder
		for i, s := range segs {
			b.WriteByte('/')
			if i > 0 {
				switch r.IntN(8) {
				case 0:
					b.WriteString("./")
				case 1:
					b.WriteString("other/../")
				case 2:
					b.WriteByte('/')
				case 3:
					b.WriteString("%2E/")
				case 4:
					b.WriteString("x%2F..%2F")
				}
			}
			for j := 0; j < len(s); j++ {
				switch r.IntN(6) {
				case 0:
					fmt.Fprintf(&b, "%%%02X", s[j])
				case 1:
					fmt.Fprintf(&b, "%%%02x", s[j])
				default:
					b.WriteByte(s[j])
				}
			}
		}
		if r.IntN(10) == 0 {
			b.WriteByte('/')
		}
		out = append(out, b.String())
	}
	return out
}

// TestOneKeyPerObject: every request path that the gateway accepts names
// the object that a store resolving paths reaches with it, so no two paths
// to one stored object route or lock differently (finding 7: a//x, a/./x
// and a/x were three lock keys; finding 1: a/../b/report was routed as a/
// and written to b/). The aliases of the findings and a generated set.
func TestOneKeyPerObject(t *testing.T) {
	g := NewWithT(t)
	r := rand.New(rand.NewPCG(1, 2))
	accepted, refused := 0, 0
	for _, obj := range [][2]string{{"reports", "a/x"}, {"tenants", "b/report"}, {"reports", "reports/audit/log"}, {"b.1", "a-b_c.d~e/f g+h"}} {
		var keys []string
		for _, p := range aliases(r, obj[0], obj[1], 500) {
			bucket, key, err := ParsePath(p)
			if err != nil {
				refused++
				continue
			}
			accepted++
			rb, rk, ok := resolve(p)
			g.Expect(ok).To(BeTrue(), p)
			g.Expect([]string{bucket, key}).To(Equal([]string{rb, rk}), "%s is routed and locked as %s/%s but reaches %s/%s", p, bucket, key, rb, rk)
			g.Expect(EscapePath(bucket, key)).To(Equal(EscapePath(obj[0], obj[1])), "what the store is sent")
			keys = append(keys, bucket+"/"+key)
		}
		g.Expect(keys).To(HaveEach(obj[0]+"/"+obj[1]), "one lock key per object")
	}
	t.Logf("%d paths accepted, %d refused", accepted, refused)
	g.Expect(accepted).To(BeNumerically(">", 100))
	g.Expect(refused).To(BeNumerically(">", 100))
}

func TestParsePath(t *testing.T) {
	tests := []struct {
		path, bucket, key, err string
	}{
		{path: "/", bucket: "", key: ""},
		{path: "/b", bucket: "b"},
		{path: "/b/", bucket: "b"},
		{path: "/b/a/x", bucket: "b", key: "a/x"},
		{path: "/b/a%20x%3F%25", bucket: "b", key: "a x?%"},
		{path: "/b/.hidden/..x/x..", bucket: "b", key: ".hidden/..x/x.."},
		{path: "b/a", err: "it does not start with /"},
		{path: "/b/a/../x", err: `it has a ".." segment`},
		{path: "/b/./x", err: `it has a "." segment`},
		{path: "/./x", err: `bucket ".": it has a "." segment`},
		{path: "/b//x", err: "it has an empty segment (// or a trailing /)"},
		{path: "/b/x%2fy", err: `it encodes a "/" as %2f: send / and . unencoded`},
		{path: "/b/x%ZZ", err: `invalid escape in "x%ZZ"`},
		{path: "/b/x%C3", err: `segment "x%C3" is not UTF-8`},
		{path: "/b/x%0A", err: `segment "x%0A" holds a control character`},
		{path: "/b/x%7F", err: `segment "x%7F" holds a control character`},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			g := NewWithT(t)
			b, k, err := ParsePath(tc.path)
			if tc.err != "" {
				g.Expect(err).To(MatchError(tc.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect([]string{b, k}).To(Equal([]string{tc.bucket, tc.key}))
		})
	}
	g := NewWithT(t)
	g.Expect(EscapePath("b", "a x/é+~.csv")).To(Equal("/b/a%20x/%C3%A9%2B~.csv"))
	g.Expect(EscapePath("b", "")).To(Equal("/b"))
	for _, p := range []string{"", "a/", "a/b", "a/b/"} {
		g.Expect(CheckPrefix(p)).To(Succeed(), p)
	}
	for p, err := range map[string]string{"a/../b": `it has a ".." segment`, "./": `it has a "." segment`, "a//": "it has an empty segment (//)", "/a": "it has an empty segment (//)", "a/..": `it has a ".." segment`} {
		g.Expect(CheckPrefix(p)).To(MatchError(err), p)
	}
}
