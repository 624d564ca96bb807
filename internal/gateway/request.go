package gateway

import (
	"net/http"
	"net/url"
	"strings"
)

// Headers that a write carries, and the object metadata the gateway keeps.
const (
	// HeaderToken carries the caller's service-account token bound to its
	// pod (the projected token file's content).
	HeaderToken = "X-Fencedlease-Token"
	// HeaderFence carries the caller's fence: the content of
	// /etc/fencedlease/fence.
	HeaderFence = "X-Fencedlease-Fence"
	// MetaFence is the user metadata (x-amz-meta-fencedlease-fence) in
	// which the gateway stores the fence of an object's last accepted
	// write. A caller's own value for it is replaced.
	MetaFence = "fencedlease-fence"
	// HeaderMetaFence is MetaFence as an HTTP header.
	HeaderMetaFence = "X-Amz-Meta-" + MetaFence
)

// Kind is what a request does to the store.
type Kind int

// Kinds of requests.
const (
	// Unsupported requests are refused (Op.Why says why).
	Unsupported Kind = iota
	// ReadObject is GET or HEAD of an object.
	ReadObject
	// ListBucket is GET or HEAD of a bucket (a listing, or a bucket
	// property).
	ListBucket
	// PutObject writes an object from the request body.
	PutObject
	// CopyObject writes an object from another (x-amz-copy-source).
	CopyObject
	// DeleteObject deletes an object.
	DeleteObject
)

// IsWrite reports whether the kind is a fenced write.
func (k Kind) IsWrite() bool { return k == PutObject || k == CopyObject || k == DeleteObject }

// Op is a classified request: path-style addressing, /bucket/key.
type Op struct {
	Kind   Kind
	Bucket string
	Key    string
	// Why says why an Unsupported request is refused.
	Why string
	// SourceBucket and SourceKey name a copy's source.
	SourceBucket, SourceKey string
}

// objectSubresources are query parameters that turn an object request into
// something other than reading or writing its content.
var objectSubresources = []string{"acl", "tagging", "retention", "legal-hold", "torrent", "restore", "select", "attributes",
	"uploads", "uploadId", "partNumber", "versionId"}

// Classify says what a request does. Writes other than a whole-object PUT,
// a copy and a DELETE are refused: multipart uploads, bulk deletes,
// object and bucket configuration cannot be made conditional on the fence.
func Classify(r *http.Request) Op {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(path, "/")
	op := Op{Bucket: bucket, Key: key}
	q := r.URL.Query()
	switch {
	case bucket == "":
		op.Why = "listing buckets is not forwarded"
		return op
	case key == "":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			op.Kind = ListBucket
			return op
		}
		op.Why = "bucket-level writes (" + r.Method + " /" + bucket + ") are not forwarded; delete objects one by one"
		return op
	}
	for _, s := range objectSubresources {
		if q.Has(s) {
			switch {
			case (r.Method == http.MethodGet || r.Method == http.MethodHead) && s == "versionId":
				op.Kind = ReadObject
			case s == "uploads" || s == "uploadId" || s == "partNumber":
				op.Why = "multipart uploads are not supported by the gateway: send the object in one PUT (up to 5 GiB), or use fences3"
			default:
				op.Why = "the ?" + s + " subresource is not forwarded"
			}
			return op
		}
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		op.Kind = ReadObject
	case http.MethodPut:
		op.Kind = PutObject
		if src := r.Header.Get("X-Amz-Copy-Source"); src != "" {
			op.Kind = CopyObject
			s, err := url.PathUnescape(strings.TrimPrefix(src, "/"))
			sb, sk, ok := strings.Cut(s, "/")
			if err != nil || !ok || sb == "" || sk == "" || strings.Contains(sk, "?versionId=") {
				return Op{Bucket: bucket, Key: key, Why: "x-amz-copy-source must name /bucket/key (no version)"}
			}
			op.SourceBucket, op.SourceKey = sb, sk
		}
	case http.MethodDelete:
		op.Kind = DeleteObject
	default:
		op.Why = r.Method + " on an object is not forwarded"
	}
	return op
}
