package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
)

func TestClassify(t *testing.T) {
	multipart := MultipartRefusal
	badPath := func(path, why string) Op {
		return Op{Kind: Invalid, Code: CodeInvalidURI, Why: "path \"" + path + "\" refused: " + why +
			"; a path must name its object as stored, without \".\" or \"..\" segments, empty segments or an encoded / or ."}
	}
	tests := []struct {
		method, target string
		header         map[string]string
		want           Op
	}{
		{"GET", "/reports/monthly/a.csv", nil, Op{Kind: ReadObject, Bucket: "reports", Key: "monthly/a.csv"}},
		{"HEAD", "/reports/monthly/a.csv?versionId=3", nil, Op{Kind: ReadObject, Bucket: "reports", Key: "monthly/a.csv"}},
		{"GET", "/reports?list-type=2&prefix=monthly/", nil, Op{Kind: ListBucket, Bucket: "reports"}},
		{"PUT", "/reports/monthly/a.csv", nil, Op{Kind: PutObject, Bucket: "reports", Key: "monthly/a.csv"}},
		{"PUT", "/reports/monthly/a.csv?x-id=PutObject", nil, Op{Kind: PutObject, Bucket: "reports", Key: "monthly/a.csv"}},
		{"DELETE", "/reports/monthly/a.csv", nil, Op{Kind: DeleteObject, Bucket: "reports", Key: "monthly/a.csv"}},
		{"PUT", "/reports/monthly/b.csv", map[string]string{"X-Amz-Copy-Source": "/reports/monthly/a%20b.csv"},
			Op{Kind: CopyObject, Bucket: "reports", Key: "monthly/b.csv", SourceBucket: "reports", SourceKey: "monthly/a b.csv"}},
		{"PUT", "/reports/monthly/b.csv", map[string]string{"X-Amz-Copy-Source": "reports"},
			Op{Bucket: "reports", Key: "monthly/b.csv", Why: "x-amz-copy-source must name /bucket/key (no version)"}},
		{"POST", "/reports/monthly/a.csv?uploads", nil, Op{Bucket: "reports", Key: "monthly/a.csv", Why: multipart}},
		{"PUT", "/reports/monthly/a.csv?partNumber=1&uploadId=x", nil, Op{Bucket: "reports", Key: "monthly/a.csv", Why: multipart}},
		{"POST", "/reports/monthly/a.csv?uploadId=x", nil, Op{Bucket: "reports", Key: "monthly/a.csv", Why: multipart}},
		{"DELETE", "/reports/monthly/a.csv?versionId=3", nil, Op{Bucket: "reports", Key: "monthly/a.csv", Why: "the ?versionId subresource is not forwarded"}},
		{"PUT", "/reports/monthly/a.csv?tagging", nil, Op{Bucket: "reports", Key: "monthly/a.csv", Why: "the ?tagging subresource is not forwarded"}},
		{"POST", "/reports?delete", nil, Op{Bucket: "reports", Why: "bucket-level writes (POST /reports) are not forwarded; delete objects one by one"}},
		{"PUT", "/reports", nil, Op{Bucket: "reports", Why: "bucket-level writes (PUT /reports) are not forwarded; delete objects one by one"}},
		{"GET", "/", nil, Op{Why: "listing buckets is not forwarded"}},
		{"PUT", "/reports/a/../b/report", nil, badPath("/reports/a/../b/report", `it has a ".." segment`)},
		{"DELETE", "/reports/./marker", nil, badPath("/reports/./marker", `it has a "." segment`)},
		{"PUT", "/reports/a//x", nil, badPath("/reports/a//x", "it has an empty segment (// or a trailing /)")},
		{"PUT", "/reports/a/x/", nil, badPath("/reports/a/x/", "it has an empty segment (// or a trailing /)")},
		{"GET", "//reports/a", nil, badPath("//reports/a", `bucket "": it has an empty segment (// or a trailing /)`)},
		{"PUT", "/reports/a%2Fx", nil, badPath("/reports/a%2Fx", `it encodes a "/" as %2F: send / and . unencoded`)},
		{"PUT", "/reports/a/%2e%2E/b", nil, badPath("/reports/a/%2e%2E/b", `it encodes a "." as %2e: send / and . unencoded`)},
		{"PUT", "/reports/a%FF", nil, badPath("/reports/a%FF", `segment "a%FF" is not UTF-8`)},
		{"PUT", "/reports/a%00b", nil, badPath("/reports/a%00b", `segment "a%00b" holds a control character`)},
		{"PUT", "/reports/a%20b%2Bc%C3%A9", nil, Op{Kind: PutObject, Bucket: "reports", Key: "a b+cé"}},
		{"GET", "/reports?list-type=2&prefix=monthly/../daily/", nil, Op{Kind: Invalid, Code: CodeInvalidArgument, Bucket: "reports",
			Why: `listing prefix "monthly/../daily/" refused: it has a ".." segment`}},
		{"GET", "/reports?list-type=2&prefix=monthly/&prefix=", nil, Op{Kind: Invalid, Code: CodeInvalidArgument, Bucket: "reports",
			Why: `listing refused: parameter prefix is given 2 times`}},
		{"PUT", "/reports/b", map[string]string{"X-Amz-Copy-Source": "reports/a/../../other/b"}, Op{Kind: Invalid, Code: CodeInvalidArgument,
			Bucket: "reports", Key: "b", Why: `x-amz-copy-source "reports/a/../../other/b" refused: it has a ".." segment`}},
		{"POST", "/reports/monthly/a.csv", nil, Op{Bucket: "reports", Key: "monthly/a.csv", Why: "POST on an object is not forwarded"}},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, http.NoBody)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			NewWithT(t).Expect(Classify(r)).To(Equal(tc.want))
		})
	}
}

func TestConfig(t *testing.T) {
	g := NewWithT(t)
	c := &Config{Routes: []Route{
		{Bucket: "reports", Namespace: "ops", FencedLease: "all"},
		{Bucket: "reports", Prefix: "monthly/", Namespace: "billing", FencedLease: "exporter"},
	}}
	g.Expect(c.Validate()).To(Succeed())
	r, ok := c.Route("reports", "monthly/a.csv")
	g.Expect(ok).To(BeTrue())
	g.Expect(r.FencedLease).To(Equal("exporter"), "the longest prefix wins")
	r, _ = c.Route("reports", "daily/a.csv")
	g.Expect(r.FencedLease).To(Equal("all"))
	_, ok = c.Route("other", "a")
	g.Expect(ok).To(BeFalse())

	g.Expect(c.ListAllowed("reports", "monthly/", "billing")).To(BeTrue())
	g.Expect(c.ListAllowed("reports", "monthly/2026", "billing")).To(BeTrue())
	g.Expect(c.ListAllowed("reports", "", "ops")).To(BeFalse(), "the listing would show billing's keys")
	g.Expect(c.ListAllowed("reports", "daily/", "ops")).To(BeTrue())
	g.Expect(c.ListAllowed("reports", "monthly/", "ops")).To(BeFalse())

	for _, bad := range []struct {
		c   Config
		err string
	}{
		{Config{}, "no routes"},
		{Config{Routes: []Route{{Bucket: "b", Namespace: "Bad_NS", FencedLease: "x"}}}, `route 0: invalid namespace "Bad_NS"`},
		{Config{Routes: []Route{{Bucket: "", Namespace: "ns", FencedLease: "x"}}}, `route 0: invalid bucket ""`},
		{Config{Routes: []Route{{Bucket: "b", Namespace: "ns", FencedLease: ""}}}, `route 0 (bucket "b" prefix ""): neither fencedLease nor fencedShardSet is set: name exactly one`},
		{Config{Routes: []Route{{Bucket: "b", Namespace: "ns", FencedLease: "Bad"}}}, `route 0 (bucket "b" prefix ""): invalid fencedLease "Bad"`},
		{Config{Routes: []Route{{Bucket: "b", Prefix: "p/", Namespace: "ns", FencedLease: "x", FencedShardSet: "y"}}},
			`route 0 (bucket "b" prefix "p/"): both fencedLease "x" and fencedShardSet "y" are set: name exactly one`},
		{Config{Routes: []Route{{Bucket: "b", Namespace: "ns", FencedShardSet: "Bad_set"}}}, `route 0 (bucket "b" prefix ""): invalid fencedShardSet "Bad_set"`},
		{Config{Routes: []Route{{Bucket: "b", Namespace: "ns", FencedLease: "x"}, {Bucket: "b", Namespace: "ns2", FencedLease: "y"}}},
			`route 1: bucket "b" prefix "" is routed twice`},
		{Config{Routes: []Route{{Bucket: "b", Prefix: "regions", Namespace: "ns", FencedShardSet: "s"}}},
			`route 0 (bucket "b" prefix "regions"): the prefix of a shard route must be empty or end in "/"`},
		{Config{Routes: []Route{{Bucket: "b", Prefix: "regions/", Namespace: "ns", FencedShardSet: "s"}, {Bucket: "b", Prefix: "regions/eu/", Namespace: "other", FencedLease: "x"}}},
			`route 1 (bucket "b" prefix "regions/eu/") lies under shard route 0 (prefix "regions/")`},
		{Config{Routes: []Route{{Bucket: "b", Namespace: "ns", FencedShardSet: "s"}, {Bucket: "b", Prefix: "eu/", Namespace: "ns", FencedShardSet: "t"}}},
			`route 1 (bucket "b" prefix "eu/") lies under shard route 0 (prefix "")`},
	} {
		g.Expect(bad.c.Validate()).To(MatchError(HavePrefix(bad.err)))
	}
}
