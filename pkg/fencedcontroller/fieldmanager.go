package fencedcontroller

import (
	"fmt"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fencedlease/fencedlease/internal/fieldmanager"
)

// FieldManagerFence is what joins a field manager and a fence in the field
// manager of a subresource write: "<manager>;fencedlease.io/fence=<N>". A
// subresource write may not move the stored fence annotation (the webhook
// refuses it: only a write of the object does, and the API server keeps
// metadata changes on /status of most built-in kinds), and a scale write
// carries a Scale, not the object; the field manager is the one part of
// such a request, besides the body, that the caller chooses and the
// webhook sees.
const FieldManagerFence = fieldmanager.Fence

// FieldManager returns the field manager that carries the fence on a
// subresource write: manager, without any fence it already carried,
// followed by FieldManagerFence and the fence. It fails when the result is
// not a valid field manager (longer than 128 characters, or a character
// that is not printable): the API server would reject the write.
func FieldManager(manager string, fenceValue int64) (string, error) {
	if fenceValue <= 0 {
		return "", fmt.Errorf("field manager %q: fence %d is not a valid fence", manager, fenceValue)
	}
	fm := fieldmanager.Format(manager, fenceValue)
	base, _, _ := fieldmanager.Parse(fm)
	if base == "" {
		return "", fmt.Errorf("no field manager to carry fence %d: set one (ClientOptions.FieldManager, or client.FieldOwner on the write)", fenceValue)
	}
	if errs := metav1validation.ValidateFieldManager(fm, field.NewPath("fieldManager")); len(errs) > 0 {
		return "", fmt.Errorf("field manager %q cannot carry fence %d: %w", base, fenceValue, errs.ToAggregate())
	}
	return fm, nil
}
