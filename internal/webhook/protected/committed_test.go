package protected_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestAGrantCommittedOnTheLeaseIsDecidedOnBeforeTheStatusRecordsIt: the
// operator has committed a grant on the Lease and its status patch is not
// applied yet (held here until the test lets it go). With holder renewal
// the new holder learns of its grant from the Lease, and may write in that
// moment: its write with the new fence is accepted, decided on the grant
// committed on the Lease. The old holder with the new fence is denied (not
// the holder), the new holder with a fence above it too (unknown fence),
// and so are the old holder's update, create and delete with its own fence
// for as long as the status lags: the operator may stay down between the
// commit and the status patch.
func TestAGrantCommittedOnTheLeaseIsDecidedOnBeforeTheStatusRecordsIt(t *testing.T) {
	f := newFixture(t)
	var hold atomic.Bool
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	wrap := func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*fencingv1alpha1.FencedLease); ok && sub == "status" && hold.Load() {
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
	f.startOperator(testenv.ManagerOptions{Options: setup.Options{WrapClient: wrap}})
	a := f.readyPod("a", time.Hour)
	b := f.readyPod("b", time.Minute)
	f.fencedLease("db")
	first := f.waitHolder("db", "a", 0)
	f.g.Expect(f.asPod(a).Create(f.ctx, f.configMap("config", "db", fenceOf(first), "a1"))).To(Succeed())

	hold.Store(true)
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	var fence int64
	f.g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, l)).To(Succeed())
		g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationState]).To(Equal("held"))
		g.Expect(l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID]).To(Equal(string(b.UID)))
		n, err := record.ParseFence(l.Annotations[fencingv1alpha1.AnnotationFence])
		g.Expect(err).NotTo(HaveOccurred())
		fence = n
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	fl := &fencingv1alpha1.FencedLease{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, fl)).To(Succeed())
	f.g.Expect(fl.Status.Fence).To(Equal(first), "the status patch of the grant waits")
	f.g.Expect(fence).To(BeNumerically(">", first))

	deniedWith := func(err error, reason string) {
		t.Helper()
		f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial (%s): %v", reason, err)
		f.g.Expect(err).To(MatchError(ContainSubstring(reason)))
	}
	deniedWith(f.writeCM(f.asPod(a), "config", fenceOf(fence), "a2"), "pod a is not the holder of FencedLease \"db\" (holder: pod b, fence "+fenceOf(fence)+")")
	deniedWith(f.writeCM(f.asPod(b), "config", fenceOf(fence+1), "b0"), "unknown fence")
	f.g.Expect(f.writeCM(f.asPod(b), "config", fenceOf(fence), "b1")).To(Succeed(), "the new holder, on the grant committed on the Lease")
	// The old holder, with its own fence, for as long as the status lags:
	// an update, a create of another object and a delete of the new
	// holder's object are all decided on the grant committed on the Lease.
	stale := "stale holder: FencedLease \"db\" is at fence " + fenceOf(fence)
	deniedWith(f.writeCM(f.asPod(a), "config", fenceOf(first), "a3"), stale)
	deniedWith(f.asPod(a).Create(f.ctx, f.configMap("other", "db", fenceOf(first), "a4")), stale)
	deniedWith(f.asPod(a).Delete(f.ctx, f.configMap("config", "db", "", "")), "pod a is not the holder of FencedLease \"db\" (holder: pod b, fence "+fenceOf(fence)+")")
	value, stored := f.storedCM("config")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"b1", fenceOf(fence)}))
	f.g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "other"}, &corev1.ConfigMap{}))).To(BeTrue())

	hold.Store(false)
	free()
	f.waitHolder("db", "b", first)
}
