// Package s3server starts a real S3 server for the tests of fenced object
// storage: versitygw with its POSIX backend on a temporary directory,
// listening on loopback. hack/tools.sh builds it from the Go module proxy
// into bin/tools/ (make test does). Nothing here is a fake: the tests see the
// server's own handling of conditional writes (If-Match, If-None-Match).
package s3server
