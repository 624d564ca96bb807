package gateway

import (
	"crypto/md5" //nolint:gosec // S3's ETag of a single-part object is its MD5.
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestTombstoneBody(t *testing.T) {
	g := NewWithT(t)
	b := TombstoneBody(42)
	g.Expect(string(b)).To(Equal("fencedlease.io tombstone, deleted with fence 00000000000000000042\n"))
	g.Expect(b).To(HaveLen(TombstoneSize))
	g.Expect(TombstoneBody(9223372036854775807)).To(HaveLen(TombstoneSize))
	g.Expect(md5.Sum(TombstoneBody(41))).NotTo(Equal(md5.Sum(TombstoneBody(42))), "two fences, two ETags")
	g.Expect(reservedContent(b)).To(BeTrue())
	g.Expect(reservedContent([]byte(strings.Repeat("x", TombstoneSize)))).To(BeFalse())
}

// TestFilterListing: tombstones leave the listing, KeyCount follows, and
// the rest is untouched; an ETag not known yet is asked about once.
func TestFilterListing(t *testing.T) {
	g := NewWithT(t)
	etag := func(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) } //nolint:gosec // an ETag
	tomb := etag(TombstoneBody(42))
	same := strings.Repeat("y", TombstoneSize)
	entry := func(key, tag string, size int) string {
		return "<Contents><Key>" + key + "</Key><ETag>&#34;" + tag + "&#34;</ETag><Size>" + strconv.Itoa(size) + "</Size></Contents>"
	}
	body := `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><KeyCount>4</KeyCount>` +
		entry("a", "0123", 3) + entry("gone", tomb, TombstoneSize) + entry("same%20size", etag([]byte(same)), TombstoneSize) + entry("gone2", tomb, TombstoneSize) +
		`<IsTruncated>false</IsTruncated></ListBucketResult>`
	asked := map[string]int{}
	known := map[string]bool{}
	out, err := filterListing([]byte(body), true, func(key, _, tag string) (bool, error) {
		if t, ok := known[tag]; ok {
			return t, nil
		}
		asked[key]++
		known[tag] = tag == tomb
		return known[tag], nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><KeyCount>2</KeyCount>` +
		entry("a", "0123", 3) + entry("same%20size", etag([]byte(same)), TombstoneSize) + `<IsTruncated>false</IsTruncated></ListBucketResult>`))
	g.Expect(asked).To(Equal(map[string]int{"gone": 1, "same size": 1}))

	versions := `<ListVersionsResult><Version><Key>k</Key><VersionId>v1</VersionId><ETag>"` + tomb + `"</ETag><Size>` + strconv.Itoa(TombstoneSize) + `</Size></Version></ListVersionsResult>`
	out, err = filterListing([]byte(versions), false, func(_, v, tag string) (bool, error) { return v == "v1" && tag == tomb, nil })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal(`<ListVersionsResult></ListVersionsResult>`))
}

func TestTombstoneETagsBounded(t *testing.T) {
	g := NewWithT(t)
	c := newTombstoneETags(2)
	c.put("a", true)
	c.put("b", false)
	_, _ = c.get("a")
	c.put("c", true)
	_, ok := c.get("b")
	g.Expect(ok).To(BeFalse(), "the least recently used is forgotten")
	tomb, ok := c.get("a")
	g.Expect(ok && tomb).To(BeTrue())
}
