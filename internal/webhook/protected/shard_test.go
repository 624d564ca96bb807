package protected_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestShardOwnerAloneWritesItsShard: an object labelled with a shard of a
// FencedShardSet is written by the shard's owner pod, with the shard's
// fence, and by no other pod with that fence. The owner may not move the
// object out of its shard (removing or changing the shard label), and an
// object of a key that is not a shard of the set, or of a set that does not
// exist, is written by nobody.
func TestShardOwnerAloneWritesItsShard(t *testing.T) {
	f := newFixture(t)
	f.startShardWebhook()
	set := f.shardSet("billing", 64)
	a, b := f.shardPod("a"), f.shardPod("b")
	asA, asB := f.asPod(a), f.asPod(b)
	n := f.grantShard(f.shardLease(set, "7"), a)
	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)

	// (a) The owner, with the shard's fence.
	f.g.Expect(asA.Create(f.ctx, f.shardCM("state", "billing", "7", fenceOf(n), "v1 by a"))).To(Succeed())
	f.g.Expect(f.writeCM(asA, "state", fenceOf(n), "v2 by a")).To(Succeed())

	// (b) Another pod, with the very same fence.
	notOwner := fmt.Sprintf(`pod b is not the holder of shard "7" of FencedShardSet "billing" (holder: pod a, fence %d)`, n)
	f.expectDenied(f.writeCM(asB, "state", fenceOf(n), "v3 by b"), fmt.Sprintf("%s: write with fence %d rejected: %s", obj, n, notOwner))
	f.expectDenied(asB.Create(f.ctx, f.shardCM("other", "billing", "7", fenceOf(n), "by b")),
		fmt.Sprintf("ConfigMap %s/other: write with fence %d rejected: %s", f.ns, n, notOwner))
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by a", fenceOf(n)}))

	// (d) The owner may not take the object out of its shard, to no shard
	// (a FencedLease of the set's name) or to another one.
	f.expectDenied(f.relabelCM(asA, "state", func(l map[string]string) { delete(l, fencingv1alpha1.LabelShard) }),
		obj+`: write rejected: label fencedlease.io/shard=7 cannot be removed (only the operator or a break-glass user can)`)
	f.expectDenied(f.relabelCM(asA, "state", func(l map[string]string) { l[fencingv1alpha1.LabelShard] = "8" }),
		obj+`: write rejected: label fencedlease.io/shard=7 cannot be changed to "8" (only the operator or a break-glass user can)`)
	cm := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "state"}, cm)).To(Succeed())
	f.g.Expect(cm.Labels).To(Equal(map[string]string{fencingv1alpha1.LabelProtectedBy: "billing", fencingv1alpha1.LabelShard: "7"}))

	// (e) A key that is not a shard of the set: past its count, or a shard's
	// number not written as the operator writes it. Its Lease, were there
	// one, does not make it a shard.
	f.grantShard(f.shardLease(set, "64"), a)
	for _, key := range []string{"64", "07"} {
		f.expectDenied(asA.Create(f.ctx, f.shardCM("k"+key, "billing", key, fenceOf(n), "by a")), fmt.Sprintf(
			`ConfigMap %s/k%s: write with fence %d rejected: FencedShardSet "billing" has no shard %q: label fencedlease.io/shard must name one of its shards (spec.shards or spec.keys)`,
			f.ns, key, n, key))
	}
	// A set that does not exist.
	f.expectDenied(asA.Create(f.ctx, f.shardCM("nowhere", "nosuch", "7", fenceOf(n), "by a")), fmt.Sprintf(
		`ConfigMap %s/nowhere: write with fence %d rejected: FencedShardSet "nosuch" not found in namespace %s, so its shard "7" has no holder`, f.ns, n, f.ns))
}

// TestShardMovesToAnotherOwner: shard "7" moves from pod a (fence n) to pod
// b (fence m) as the operator moves it: revoked, then granted to b. From
// the revocation on a's writes with n are rejected; b writes with m. Each
// shard is its own: b may not write an object of shard "8", which a still
// owns, with its fence of shard "7" nor with shard 8's, and a still may. A
// delete is the current owner's, of an object last written with the
// current fence.
func TestShardMovesToAnotherOwner(t *testing.T) {
	f := newFixture(t)
	f.startShardWebhook()
	set := f.shardSet("billing", 64)
	a, b := f.shardPod("a"), f.shardPod("b")
	asA, asB := f.asPod(a), f.asPod(b)
	seven, eight := f.shardLease(set, "7"), f.shardLease(set, "8")
	n, n8 := f.grantShard(seven, a), f.grantShard(eight, a)
	f.g.Expect(asA.Create(f.ctx, f.shardCM("state", "billing", "7", fenceOf(n), "v1 by a"))).To(Succeed())
	f.g.Expect(asA.Create(f.ctx, f.shardCM("older", "billing", "7", fenceOf(n), "o1 by a"))).To(Succeed())
	f.g.Expect(asA.Create(f.ctx, f.shardCM("eight", "billing", "8", fenceOf(n8), "e1 by a"))).To(Succeed())
	obj := func(name string) string { return fmt.Sprintf("ConfigMap %s/%s", f.ns, name) }

	// (c) Revoked: nobody owns shard "7", its old owner's writes are refused.
	f.revokeShard(seven)
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n), "v2 by a"),
		fmt.Sprintf(`%s: write with fence %d rejected: shard "7" of FencedShardSet "billing" has no holder (fence %d)`, obj("state"), n, n))

	m := f.grantShard(seven, b)
	f.g.Expect(m).To(BeNumerically(">", n8))
	stale := fmt.Sprintf(`%s: write with fence %d rejected: stale holder: shard "7" of FencedShardSet "billing" is at fence %d`, obj("state"), n, m)
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n), "v2 by a"), stale)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v2 by b")).To(Succeed())
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))

	// Shard "8" is still a's: b's fence of shard "7" is none of shard 8's,
	// and b is not its owner.
	f.expectDenied(f.writeCM(asB, "eight", fenceOf(m), "e2 by b"),
		fmt.Sprintf(`%s: write with fence %d rejected: unknown fence: shard "8" of FencedShardSet "billing" is at fence %d`, obj("eight"), m, n8))
	f.expectDenied(f.writeCM(asB, "eight", fenceOf(n8), "e2 by b"),
		fmt.Sprintf(`%s: write with fence %d rejected: pod b is not the holder of shard "8" of FencedShardSet "billing" (holder: pod a, fence %d)`, obj("eight"), n8, n8))
	f.g.Expect(f.writeCM(asA, "eight", fenceOf(n8), "e2 by a")).To(Succeed())

	// (f) Deletes: not by the old owner; by the new one, only of what
	// carries the current fence.
	f.expectDenied(asA.Delete(f.ctx, f.shardCM("state", "billing", "7", "", "")),
		fmt.Sprintf(`%s: delete rejected: pod a is not the holder of shard "7" of FencedShardSet "billing" (holder: pod b, fence %d)`, obj("state"), m))
	f.expectDenied(asB.Delete(f.ctx, f.shardCM("older", "billing", "7", "", "")), fmt.Sprintf(
		`%s: delete rejected: the object was last written with fence %d, not with the current fence %d of shard "7" of FencedShardSet "billing": the holder deletes only what carries its current fence (write fencedlease.io/fence=%d on it first, then delete that version)`,
		obj("older"), n, m, m))
	f.g.Expect(asB.Delete(f.ctx, f.shardCM("state", "billing", "7", "", ""))).To(Succeed())
	f.g.Expect(apierrors.IsNotFound(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "state"}, &corev1.ConfigMap{}))).To(BeTrue())
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "older"}, &corev1.ConfigMap{})).To(Succeed())

	// The stale owner's write is told on the set.
	f.g.Eventually(func() []string { return f.setEvents("billing") }).WithTimeout(timeout).Should(ContainElement(
		fencingv1alpha1.EventStaleWriteRejected + ": " + stale))
}

// startShardWebhook runs the operator's webhooks without its controllers:
// the tests write the shards' Leases as the FencedShardSet controller
// would, and no controller may write them too.
func (f *fixture) startShardWebhook() {
	f.startOperator(testenv.ManagerOptions{NoController: true, Webhooks: &env.WebhookInstallOptions, WebhookOptions: webhookOptions})
}

// shardSet creates a FencedShardSet of n shards.
func (f *fixture) shardSet(name string, n int32) *fencingv1alpha1.FencedShardSet {
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "sharded"}}, Shards: n}}
	f.g.Expect(f.c.Create(f.ctx, set)).To(Succeed())
	return set
}

// shardPod creates a pod of the workload; it acts with its own bound token
// (asPod).
func (f *fixture) shardPod(name string) *corev1.Pod {
	pod, err := testenv.CreatePod(f.ctx, f.c, testenv.Pod{Namespace: f.ns, Name: name, Labels: map[string]string{"app": "sharded"}, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	return pod
}

// shardLease creates the Lease of a shard as the operator does: named
// "<set>-<key>", controlled by the set, labelled with the set and the key;
// no grant yet.
func (f *fixture) shardLease(set *fencingv1alpha1.FencedShardSet, key string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: record.ShardLeaseName(set.Name, key),
		Labels:          map[string]string{record.LabelShardSet: set.Name, record.LabelShard: key},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, fencingv1alpha1.GroupVersion.WithKind("FencedShardSet"))}}}
	f.g.Expect(f.operator.Create(f.ctx, l)).To(Succeed())
	return l
}

// grantShard grants the shard of Lease l to pod as the operator does: a
// pending grant names the pod, the resourceVersion of that write is the
// fence, and a second write commits it (held, with the fence). It returns
// the fence.
func (f *fixture) grantShard(l *coordinationv1.Lease, pod *corev1.Pod) int64 {
	rec := record.ParseLease(l.Annotations)
	l.Spec.HolderIdentity = ptr.To(pod.Name)
	f.writeShardRecord(l, record.Lease{State: record.StatePending, HolderUID: string(pod.UID), Fence: rec.Fence, Renewal: record.RenewalOperator})
	fence, err := record.FenceFromResourceVersion(l.ResourceVersion)
	f.g.Expect(err).NotTo(HaveOccurred())
	rec = record.ParseLease(l.Annotations)
	rec.State, rec.Fence = record.StateHeld, fence
	f.writeShardRecord(l, rec)
	return fence
}

// revokeShard ends the grant on Lease l as the operator does: state
// revoked, the holder and the fence kept.
func (f *fixture) revokeShard(l *coordinationv1.Lease) {
	rec := record.ParseLease(l.Annotations)
	rec.State = record.StateRevoked
	f.writeShardRecord(l, rec)
}

// writeShardRecord writes rec into the annotations of Lease l and updates
// it as the operator; l is then the version stored.
func (f *fixture) writeShardRecord(l *coordinationv1.Lease, rec record.Lease) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	rec.Apply(l.Annotations)
	f.g.Expect(f.operator.Update(f.ctx, l)).To(Succeed())
}

// shardCM is a ConfigMap protected by shard key of set; fence "" leaves
// the annotation out.
func (f *fixture) shardCM(name, set, key, fence, value string) *corev1.ConfigMap {
	cm := f.configMap(name, set, fence, value)
	cm.Labels[fencingv1alpha1.LabelShard] = key
	return cm
}

// relabelCM updates a ConfigMap as c, with its labels changed by mutate and
// the rest, the fence included, as stored.
func (f *fixture) relabelCM(c client.Client, name string, mutate func(map[string]string)) error {
	cm := &corev1.ConfigMap{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, cm)).To(Succeed())
	mutate(cm.Labels)
	return c.Update(f.ctx, cm)
}

// setEvents lists "reason: note" of the Events recorded for a
// FencedShardSet.
func (f *fixture) setEvents(name string) []string {
	var list eventsv1.EventList
	f.g.Expect(f.c.List(f.ctx, &list, client.InNamespace(f.ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "FencedShardSet" {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}
