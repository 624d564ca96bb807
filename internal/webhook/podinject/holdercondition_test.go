package podinject_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// holderConditionIn is the status of the fencedlease.io/holder condition a
// pod status patch writes, or "" when it writes none.
func holderConditionIn(obj client.Object, patch client.Patch) corev1.ConditionStatus {
	data, err := patch.Data(obj)
	if err != nil {
		return ""
	}
	var p struct {
		Status struct {
			Conditions []corev1.PodCondition `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal(data, &p) != nil {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == fencingv1alpha1.ConditionHolder {
			return c.Status
		}
	}
	return ""
}

// failOnce makes the first write of the holder condition with a status on a
// pod fail, as a conflict with the kubelet or a lost request would.
type failOnce struct {
	mu     sync.Mutex
	armed  map[string]bool // pod name + status
	failed atomic.Int32
}

func (f *failOnce) arm(pod string, status corev1.ConditionStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed[pod+"/"+string(status)] = true
}

func (f *failOnce) take(pod string, status corev1.ConditionStatus) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := pod + "/" + string(status)
	if !f.armed[k] {
		return false
	}
	delete(f.armed, k)
	f.failed.Add(1)
	return true
}

// TestHolderConditionIsRepairedWhenItsWriteFails: the write of the holder
// condition fails once, for the new holder (True) and then for the demoted
// holder (False). Later passes make it again: the holder becomes Ready, and
// the demoted holder does not stay Ready next to the new one.
func TestHolderConditionIsRepairedWhenItsWriteFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fail := &failOnce{armed: map[string]bool{}}
	wrap := func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if pod, ok := obj.(*corev1.Pod); ok && sub == "status" {
					if status := holderConditionIn(pod, patch); status != "" && fail.take(pod.Name, status) {
						return apierrors.NewTimeoutError("the request was lost (injected)", 1)
					}
				}
				return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
	fail.arm("a", corev1.ConditionTrue)
	m, err := testenv.StartManager(f.ctx, env.Config, testenv.ManagerOptions{Namespace: f.ns, Options: setup.Options{WrapClient: wrap}})
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })

	fl := f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.ReadinessGate = true
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	a, err := f.createPod("a", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	b, err := f.createPod("b", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, a, time.Now().Add(-time.Hour).Truncate(time.Second))).To(Succeed())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, b, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	fence := f.waitHolderCondition(fl, "a", "b", 0)
	f.g.Expect(fail.failed.Load()).To(BeEquivalentTo(1), "the holder's first condition write failed")

	fail.arm("a", corev1.ConditionFalse)
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, f.pod("a"))).To(Succeed())
	f.waitHolderCondition(fl, "b", "a", fence)
	f.g.Expect(fail.failed.Load()).To(BeEquivalentTo(2), "the demoted holder's first condition write failed")
}

// TestHolderConditionLeavesTheKubeletsConditionsAlone: between the moment a
// reconcile read the new holder from its cache and its publication (right
// after the write that grants it, in the same reconcile, before the
// publication lists the pods), the kubelet reports the holder's containers
// not ready. The holder condition the publication writes must not bring
// back the cached ContainersReady. (Injected after the status patch, as it
// was, the kubelet's write may now come after the publication's list, which
// runs beside that patch: the publication then fails its lock on b, and b,
// no longer ready, is never published.)
func TestHolderConditionLeavesTheKubeletsConditionsAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var injected atomic.Bool
	kubelet := make(chan error, 1)
	// What the API server had as b's ContainersReady right after the first
	// write of b's holder condition True.
	after := make(chan corev1.ConditionStatus, 1)
	var once sync.Once
	wrap := func(c client.Client) client.Client {
		return testenv.Intercept(c, interceptor.Funcs{
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				err := cl.Update(ctx, obj, opts...)
				// The write that grants b, before its publication: the
				// kubelet writes right after it.
				if l, ok := obj.(*coordinationv1.Lease); ok && err == nil && !injected.Load() && ptr.Deref(l.Spec.HolderIdentity, "") == "b" {
					injected.Store(true)
					kubelet <- testenv.SetContainersNotReady(f.ctx, f.c, f.pod("b"))
				}
				return err
			},
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				status := holderConditionIn(obj, patch)
				err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
				if err == nil && obj.GetName() == "b" && status == corev1.ConditionTrue && injected.Load() {
					once.Do(func() { after <- f.conditions("b")[corev1.ContainersReady] })
				}
				return err
			},
		})
	}
	m, err := testenv.StartManager(f.ctx, env.Config, testenv.ManagerOptions{Namespace: f.ns, Options: setup.Options{WrapClient: wrap}})
	f.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Crash(); m.Wait() })

	fl := f.fencedLease("db", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.ReadinessGate = true
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	a, err := f.createPod("a", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	b, err := f.createPod("b", injectLabels(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, a, time.Now().Add(-time.Hour).Truncate(time.Second))).To(Succeed())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, b, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	f.waitHolderCondition(fl, "a", "b", 0)

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, f.pod("a"))).To(Succeed())
	f.g.Eventually(kubelet).WithTimeout(timeout).Should(Receive(Not(HaveOccurred())), "the kubelet's write was injected")
	var ready corev1.ConditionStatus
	f.g.Eventually(after).WithTimeout(timeout).Should(Receive(&ready), "b's holder condition was written True")
	f.g.Expect(ready).To(Equal(corev1.ConditionFalse), "the holder condition's write brought back the cached ContainersReady")
}
