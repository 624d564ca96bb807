package gateway

import (
	"encoding/xml"
	"net/http"
)

// s3Error is the body of an S3 error response.
type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

// writeError answers with an S3 error response.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, message, requestID string) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("X-Amz-Request-Id", requestID)
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	body, _ := xml.Marshal(s3Error{Code: code, Message: message, Resource: r.URL.Path, RequestID: requestID})
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}
