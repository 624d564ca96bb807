// Package storage tests fenced object storage end to end: the fence
// gateway and package fences3 against a real S3 server (versitygw, started
// by the tests), a real kube-apiserver and etcd with the operator and its
// webhooks, and writers that are real processes acting as pods with their
// bound service-account tokens (testdata/writer), paused with SIGSTOP.
package storage
