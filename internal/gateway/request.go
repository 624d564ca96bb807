package gateway

import (
	"fmt"
	"net/http"
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
	// Invalid requests name no single object (a path or copy source
	// ParsePath refuses): 400, Op.Why says why.
	Invalid
)

// IsWrite reports whether the kind is a fenced write.
func (k Kind) IsWrite() bool { return k == PutObject || k == CopyObject || k == DeleteObject }

// Op is a classified request: path-style addressing, /bucket/key.
type Op struct {
	Kind   Kind
	Bucket string
	Key    string
	// Why says why an Unsupported or Invalid request is refused; Code is
	// an Invalid request's S3 error code.
	Why  string
	Code string
	// SourceBucket and SourceKey name a copy's source.
	SourceBucket, SourceKey string
}

// MultipartRefusal is the answer to a multipart upload: the gateway fences
// whole-object writes only, and S3 clients start a multipart upload by
// themselves above a size that their configuration sets.
const MultipartRefusal = "multipart uploads are not supported by the fence gateway: send the object in one PUT (up to 5 GiB). " +
	"awscli: raise multipart_threshold above the object's size (aws configure set default.s3.multipart_threshold 5GB, " +
	"or multipart_threshold in the s3 section of ~/.aws/config); boto3: TransferConfig(multipart_threshold=...); " +
	"AWS SDK for Go's upload manager: a PartSize larger than the object, or PutObject; or use fences3"

// objectSubresources are query parameters that turn an object request into
// something other than reading or writing its content.
var objectSubresources = []string{"acl", "tagging", "retention", "legal-hold", "torrent", "restore", "select", "attributes",
	"uploads", "uploadId", "partNumber", "versionId"}

// Classify says what a request does. Writes other than a whole-object PUT,
// a copy and a DELETE are refused: multipart uploads, bulk deletes,
// object and bucket configuration cannot be made conditional on the fence.
func Classify(r *http.Request) Op {
	raw := requestPath(r)
	bucket, key, err := ParsePath(raw)
	if err != nil {
		return Op{Kind: Invalid, Code: CodeInvalidURI, Why: fmt.Sprintf("path %q refused: %v; a path must name its object as stored, without \".\" or \"..\" segments, empty segments or an encoded / or .", raw, err)}
	}
	op := Op{Bucket: bucket, Key: key}
	q := r.URL.Query()
	switch {
	case bucket == "":
		op.Why = "listing buckets is not forwarded"
		return op
	case key == "":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if n := len(q["prefix"]); n > 1 {
				// The route is judged by the first; a store may list by another.
				return Op{Kind: Invalid, Code: CodeInvalidArgument, Bucket: bucket, Why: fmt.Sprintf("listing refused: parameter prefix is given %d times", n)}
			}
			if err := CheckPrefix(q.Get("prefix")); err != nil {
				return Op{Kind: Invalid, Code: CodeInvalidArgument, Bucket: bucket, Why: fmt.Sprintf("listing prefix %q refused: %v", q.Get("prefix"), err)}
			}
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
				op.Why = MultipartRefusal
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
			if strings.Contains(src, "?") {
				return Op{Bucket: bucket, Key: key, Why: "x-amz-copy-source must name /bucket/key (no version)"}
			}
			sb, sk, err := ParsePath("/" + strings.TrimPrefix(src, "/"))
			switch {
			case err != nil:
				return Op{Kind: Invalid, Code: CodeInvalidArgument, Bucket: bucket, Key: key, Why: fmt.Sprintf("x-amz-copy-source %q refused: %v", src, err)}
			case sb == "" || sk == "":
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

// requestPath is the path as the client sent it, before any decoding.
func requestPath(r *http.Request) string {
	if u := r.RequestURI; strings.HasPrefix(u, "/") {
		p, _, _ := strings.Cut(u, "?")
		return p
	}
	return r.URL.EscapedPath()
}

// Path is the object's path as the gateway sends it to the store.
func (o Op) Path() string { return EscapePath(o.Bucket, o.Key) }
