package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// unsignedPayload is the payload hash of a request whose body is streamed
// without a digest (S3's UNSIGNED-PAYLOAD).
const unsignedPayload = "UNSIGNED-PAYLOAD"

// emptyPayload is the SHA-256 of an empty body.
const emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Upstream is the S3-compatible store behind the gateway. Every request to
// it is signed (SigV4) with the gateway's own credentials.
type Upstream struct {
	// Endpoint is the store's base URL (path-style addressing).
	Endpoint *url.URL
	Region   string
	Creds    aws.CredentialsProvider
	Client   *http.Client
	signer   *v4.Signer
}

// NewUpstream returns an Upstream.
func NewUpstream(endpoint, region string, creds aws.CredentialsProvider, client *http.Client) (*Upstream, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("invalid upstream endpoint %q: want http(s)://host[:port]", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Upstream{Endpoint: u, Region: region, Creds: creds, Client: client, signer: v4.NewSigner()}, nil
}

// request builds a signed request for escapedPath (as "/bucket/key",
// escaped) and rawQuery.
func (u *Upstream) request(ctx context.Context, method, escapedPath, rawQuery string, header http.Header, body io.Reader, length int64) (*http.Request, error) {
	target := *u.Endpoint
	target.RawPath = u.Endpoint.Path + escapedPath
	p, err := url.PathUnescape(target.RawPath)
	if err != nil {
		return nil, fmt.Errorf("invalid path %q: %w", escapedPath, err)
	}
	target.Path = p
	target.RawQuery = rawQuery
	req, err := http.NewRequestWithContext(ctx, method, target.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	payload := emptyPayload
	if body != nil {
		payload = unsignedPayload
		req.ContentLength = length
	} else {
		req.Body, req.ContentLength = nil, 0
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	creds, err := u.Creds.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("upstream credentials: %w", err)
	}
	if err := u.signer.SignHTTP(ctx, creds, req, payload, "s3", u.Region, time.Now(), func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = true
	}); err != nil {
		return nil, fmt.Errorf("sign upstream request: %w", err)
	}
	return req, nil
}

// Do sends a signed request.
func (u *Upstream) Do(ctx context.Context, method, escapedPath, rawQuery string, header http.Header, body io.Reader, length int64) (*http.Response, error) {
	req, err := u.request(ctx, method, escapedPath, rawQuery, header, body, length)
	if err != nil {
		return nil, err
	}
	return u.Client.Do(req)
}

// objectState is what a HEAD says of an object.
type objectState struct {
	// Exists says that the store has the object: a tombstone exists too.
	Exists bool
	ETag   string
	// Fence is its MetaFence user metadata ("" when none).
	Fence string
	// Deleted says that it is a tombstone: the object is deleted.
	Deleted bool
}

// Present reports whether the object exists and is not deleted.
func (s objectState) Present() bool { return s.Exists && !s.Deleted }

// storeRefusal is a store's 4xx answer to the gateway's own read: the
// caller gets it (nothing was written), not a "store unavailable".
type storeRefusal struct {
	status int
	msg    string
}

func (e *storeRefusal) Error() string { return e.msg }

// Head reads an object's ETag, stored fence and tombstone mark. An answer
// other than 200 or 404 is an error: a *storeRefusal for a 4xx, an
// *unavailable for a 5xx or no answer; nothing was written either way.
func (u *Upstream) Head(ctx context.Context, escapedPath string) (objectState, error) {
	resp, err := u.Do(ctx, http.MethodHead, escapedPath, "", nil, nil, 0)
	if err != nil {
		return objectState{}, &unavailable{"the store did not answer the gateway's read (nothing was written): " + err.Error()}
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return objectState{Exists: true, ETag: resp.Header.Get("ETag"), Fence: resp.Header.Get(HeaderMetaFence), Deleted: isTombstone(resp.Header)}, nil
	case resp.StatusCode == http.StatusNotFound:
		return objectState{}, nil
	case resp.StatusCode < 500:
		return objectState{}, &storeRefusal{resp.StatusCode, "the store refused the gateway's read of the object (nothing was written): " + resp.Status}
	}
	return objectState{}, &unavailable{"the store failed the gateway's read of the object (nothing was written): " + resp.Status}
}
