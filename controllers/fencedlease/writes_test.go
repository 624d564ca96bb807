package fencedlease_test

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// podWrites counts the operator's patches of each pod's metadata.
type podWrites struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *podWrites) wrap(c client.Client) client.Client {
	return testenv.Intercept(c, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			err := cl.Patch(ctx, obj, patch, opts...)
			switch obj.(type) {
			case *corev1.Pod, *metav1.PartialObjectMetadata:
				if err == nil {
					w.mu.Lock()
					w.n[obj.GetName()]++
					w.mu.Unlock()
				}
			}
			return err
		},
	})
}

// counts is the writes of each pod so far.
func (w *podWrites) counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.n)
}

func (w *podWrites) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.n)
}

// TestEachPodIsWrittenOnceAGrantWhereItCan: a standby is marked with the
// committed grant when it is first made a standby, and the old holder in
// the patch that demotes it, so the publication, which leaves a pod marked
// with its grant alone, writes no pod but the new holder (design.md,
// "Publishing"). A first grant with two candidates writes the standby once
// and the holder twice (its label, its publication); an Immediate takeover
// writes the old holder once and the new holder once. Marking in the
// publication only, each standby was written twice.
func TestEachPodIsWrittenOnceAGrantWhereItCan(t *testing.T) {
	f := newFixture(t)
	w := &podWrites{n: map[string]int{}}
	f.startManager(testenv.ManagerOptions{Options: setup.Options{WrapClient: w.wrap}})
	a := f.readyPod("a", time.Hour)
	f.readyPod("b", time.Minute)
	f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate })
	pod, fence := f.waitHolder("db")
	f.g.Expect(pod).To(Equal("a"))
	f.g.Eventually(func() string { return f.grantMark("b") }).WithTimeout(timeout).WithPolling(poll).Should(Equal(strconv.FormatInt(fence, 10)))
	f.g.Consistently(w.counts).WithTimeout(time.Second).WithPolling(poll).
		Should(Equal(map[string]int{"a": 2, "b": 1}), "the first grant's pod writes")
	w.reset()

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	pod, next := f.waitNewHolder("db", fence)
	f.g.Expect(pod).To(Equal("b"))
	f.g.Eventually(func() string { return f.grantMark("a") }).WithTimeout(timeout).WithPolling(poll).Should(Equal(strconv.FormatInt(next, 10)))
	f.g.Consistently(w.counts).WithTimeout(time.Second).WithPolling(poll).
		Should(Equal(map[string]int{"a": 1, "b": 1}), "the takeover's pod writes")
	f.g.Expect(f.holders()).To(Equal([]string{"b"}))
}

// grantMark is the grant a pod is marked with as a standby.
func (f *fixture) grantMark(pod string) string {
	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: pod}, p)).To(Succeed())
	if p.Annotations[fencingv1alpha1.AnnotationRole] != fencingv1alpha1.RoleStandby {
		return ""
	}
	return p.Annotations[fencingv1alpha1.AnnotationGrant]
}
