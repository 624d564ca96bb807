package gateway

import (
	"bytes"
	"container/list"
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// A fenced DELETE does not remove the object: it overwrites it, conditional
// on what the gateway checked, with a tombstone that keeps the deleting
// write's fence. Without it, a deletion would leave nothing that remembers
// its fence, and a create conditional on absence admitted before it (held
// on its way to the store, or by another replica) could land after it and
// bring an older fence back. Reads answer a tombstone as absent, listings
// leave it out, and a create over it is a conditional overwrite judged
// against its fence, like any write.
const (
	// MetaDeleted is the user metadata (x-amz-meta-fencedlease-deleted:
	// true) that marks a tombstone. A caller's own value is dropped.
	MetaDeleted = "fencedlease-deleted"
	// HeaderMetaDeleted is MetaDeleted as an HTTP header.
	HeaderMetaDeleted = "X-Amz-Meta-" + MetaDeleted
	// tombstonePrefix starts every tombstone's content; the fence follows
	// in 20 digits, so that every tombstone has TombstoneSize bytes.
	tombstonePrefix = "fencedlease.io tombstone, deleted with fence "
	// TombstoneSize is the size of every tombstone.
	TombstoneSize = len(tombstonePrefix) + 20 + 1
)

// TombstoneBody is the content of the tombstone of a deletion with fence
// f. The fence is in the content, not only in the metadata, so that
// tombstones of different fences have different ETags: a conditional write
// on an older tombstone's ETag cannot succeed on a newer one's (a fixed
// content would make delete, create, delete an A-B-A on the ETag).
func TombstoneBody(f int64) []byte {
	return fmt.Appendf(nil, "%s%020d\n", tombstonePrefix, f)
}

// reservedContent reports whether a body of TombstoneSize bytes is a
// tombstone's content: a write of it is refused, so that a listing can
// tell tombstones by their ETag.
func reservedContent(b []byte) bool {
	return len(b) == TombstoneSize && bytes.HasPrefix(b, []byte(tombstonePrefix))
}

// isTombstone reports whether a store's answer for an object is a
// tombstone.
func isTombstone(h http.Header) bool { return h.Get(HeaderMetaDeleted) != "" }

// tombstoneETags remembers which ETags of TombstoneSize objects are
// tombstones, so that a listing HEADs an object of that size only for an
// ETag it has not seen. All tombstones of one fence have one content, so
// on stores whose ETag is the content's MD5 there are few of them. At most
// max entries, the least recently used forgotten first.
type tombstoneETags struct {
	mu    sync.Mutex
	max   int
	order *list.List
	byTag map[string]*list.Element
}

type etagEntry struct {
	etag      string
	tombstone bool
}

func newTombstoneETags(max int) *tombstoneETags {
	return &tombstoneETags{max: max, order: list.New(), byTag: map[string]*list.Element{}}
}

func (c *tombstoneETags) get(etag string) (tombstone, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byTag[etag]
	if !ok {
		return false, false
	}
	c.order.MoveToFront(e)
	return e.Value.(etagEntry).tombstone, true
}

func (c *tombstoneETags) put(etag string, tombstone bool) {
	if etag == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byTag[etag]; ok {
		e.Value = etagEntry{etag, tombstone}
		c.order.MoveToFront(e)
		return
	}
	c.byTag[etag] = c.order.PushFront(etagEntry{etag, tombstone})
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.byTag, old.Value.(etagEntry).etag)
	}
}

// maxListing bounds the listing body the gateway reads to leave tombstones
// out: a page of 1,000 keys of 1 KiB each is about 1.5 MiB.
const maxListing = 16 << 20

// listedObject is what filterListing reads of a <Contents> or <Version>
// entry.
type listedObject struct {
	Key       string `xml:"Key"`
	VersionID string `xml:"VersionId"`
	ETag      string `xml:"ETag"`
	Size      int64  `xml:"Size"`
}

// filterListing removes the tombstones from a ListObjects, ListObjectsV2
// or ListObjectVersions answer: entries of TombstoneSize bytes whose ETag
// is a tombstone's (isTombstone asks the store when it is not known), and
// corrects KeyCount. urlKeys says that keys are URL-encoded
// (encoding-type=url). Anything else is returned as it is.
func filterListing(body []byte, urlKeys bool, isTombstone func(key, versionID, etag string) (bool, error)) ([]byte, error) {
	var out bytes.Buffer
	removed := 0
	rest := body
	for {
		start, name := nextEntry(rest)
		if start < 0 {
			break
		}
		end := bytes.Index(rest[start:], []byte("</"+name+">"))
		if end < 0 {
			break
		}
		end += start + len("</"+name+">")
		var o listedObject
		drop := false
		if err := xml.Unmarshal(rest[start:end], &o); err == nil && o.Size == int64(TombstoneSize) {
			key := o.Key
			if urlKeys {
				key = unescapeQuery(key)
			}
			t, err := isTombstone(key, o.VersionID, normalizeETag(o.ETag))
			if err != nil {
				return nil, err
			}
			drop = t
		}
		if drop {
			out.Write(rest[:start])
			removed++
		} else {
			out.Write(rest[:end])
		}
		rest = rest[end:]
	}
	out.Write(rest)
	if removed == 0 {
		return body, nil
	}
	return fixKeyCount(out.Bytes(), removed), nil
}

// nextEntry finds the next <Contents> or <Version> element.
func nextEntry(b []byte) (int, string) {
	c := bytes.Index(b, []byte("<Contents>"))
	v := bytes.Index(b, []byte("<Version>"))
	switch {
	case c < 0 && v < 0:
		return -1, ""
	case v < 0 || (c >= 0 && c < v):
		return c, "Contents"
	default:
		return v, "Version"
	}
}

// fixKeyCount lowers ListObjectsV2's <KeyCount> by removed.
func fixKeyCount(b []byte, removed int) []byte {
	const open, closeTag = "<KeyCount>", "</KeyCount>"
	i := bytes.Index(b, []byte(open))
	if i < 0 {
		return b
	}
	j := bytes.Index(b[i:], []byte(closeTag))
	if j < 0 {
		return b
	}
	n, err := strconv.Atoi(string(b[i+len(open) : i+j]))
	if err != nil {
		return b
	}
	return append(append(append([]byte{}, b[:i+len(open)]...), strconv.Itoa(max(n-removed, 0))...), b[i+j:]...)
}

func normalizeETag(s string) string { return strings.ToLower(strings.Trim(s, `"`)) }

func unescapeQuery(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// classifyETag tells whether an object of TombstoneSize bytes with etag is
// a tombstone: from memory, else from a HEAD of it.
func (x *exchange) classifyETag(ctx context.Context, key, versionID, etag string) (bool, error) {
	if t, ok := x.s.tombstones.get(etag); ok {
		return t, nil
	}
	q := ""
	if versionID != "" {
		q = "versionId=" + url.QueryEscape(versionID)
	}
	resp, err := x.s.o.Upstream.Do(ctx, http.MethodHead, EscapePath(x.op.Bucket, key), q, nil, nil, 0)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Gone since the listing, or not readable: leave it listed.
		return false, nil
	}
	t := isTombstone(resp.Header)
	if normalizeETag(resp.Header.Get("ETag")) == etag {
		x.s.tombstones.put(etag, t)
	}
	return t, nil
}
