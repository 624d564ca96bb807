// Package fencetest helps test code that reads the fencedlease token files.
//
// [KubeletWriter] publishes files the way the kubelet updates a downward-API
// volume, including the atomic "..data" symlink swap, so that a test sees the
// same sequence of directory changes (and inotify events) as a real pod.
package fencetest
