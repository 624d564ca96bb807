package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
)

// TestNamesMatchTheWebhook: pkg/fencedcontroller spells the fence where the
// webhook reads it (it may not import the API package).
func TestNamesMatchTheWebhook(t *testing.T) {
	g := NewWithT(t)
	g.Expect(fencedcontroller.FieldManagerFence).To(Equal(fencingv1alpha1.FieldManagerFence))
	g.Expect(fence.Annotation).To(Equal(fencingv1alpha1.AnnotationFence))
}
