package fence

import (
	"fmt"
	"maps"
	"strconv"
)

// Annotation carries the writer's fence on a write to a protected ConfigMap
// or Secret. The operator's webhook accepts the write only when it is the
// lease's current fence and not lower than the fence stored on the object.
const Annotation = "fencedlease.io/fence"

// Annotated is the part of an object Stamp needs. Every Kubernetes object
// (metav1.Object) satisfies it; the small interface keeps this package free
// of Kubernetes imports.
type Annotated interface {
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
}

// Stamp sets the Annotation on obj to the token's fence, just before the
// object is written. It refuses a token that is not a holder token: such a
// write would be rejected anyway, and failing here tells the caller why.
// The annotation map is copied, never modified in place, so a map shared
// with an informer cache is left alone.
func Stamp(obj Annotated, tok Token) error {
	if !tok.IsHolder() {
		return fmt.Errorf("stamp %s: %w (token: %s)", Annotation, ErrNotHolder, tok)
	}
	a := maps.Clone(obj.GetAnnotations())
	if a == nil {
		a = make(map[string]string, 1)
	}
	a[Annotation] = strconv.FormatInt(tok.Fence, 10)
	obj.SetAnnotations(a)
	return nil
}
