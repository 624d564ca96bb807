//go:build tools

// Package tools pins versitygw, the S3 server that the fenced-storage tests
// start (its POSIX backend, on a temporary directory).
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
