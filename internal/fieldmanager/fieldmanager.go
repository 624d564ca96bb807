// Package fieldmanager declares how a subresource write (status, scale)
// carries its fence: in its field manager, "<manager>;fencedlease.io/fence=<N>".
// Format writes it and Parse reads it: pkg/fencedcontroller writes, the
// fencing webhook reads, and the tests do both with the same two functions.
package fieldmanager

import (
	"errors"
	"strings"

	"github.com/fencedlease/fencedlease/internal/record"
)

// Fence joins a field manager and its fence: "<manager>" + Fence + "<N>".
const Fence = ";" + record.AnnotationFence + "="

// ErrNoFence is Parse's error for a field manager that carries no fence.
var ErrNoFence = errors.New("the field manager carries no fence")

// Format returns the field manager that carries fence: manager, without
// every fence it already carried, followed by Fence and the fence. It does not
// check that the result is a valid field manager.
func Format(manager string, fence int64) string {
	return base(manager) + Fence + record.FormatFence(fence)
}

// Parse splits a field manager into the manager and the fence it carries,
// the one after its last Fence. It returns ErrNoFence when there is none,
// and record.ParseFence's error when the fence is not a canonical fence.
func Parse(fieldManager string) (manager string, fence int64, err error) {
	i := strings.LastIndex(fieldManager, Fence)
	if i < 0 {
		return fieldManager, 0, ErrNoFence
	}
	fence, err = record.ParseFence(fieldManager[i+len(Fence):])
	return fieldManager[:i], fence, err
}

// base is manager without any fence it carries: what precedes its first
// Fence, or all of it when it carries none. A manager fenced again and
// again carries one fence, never a growing list of them.
func base(manager string) string {
	b, _, _ := strings.Cut(manager, Fence)
	return b
}
