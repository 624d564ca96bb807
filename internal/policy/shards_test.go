package policy_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

func shardLeaseDenied(ns, name, user, what string) string {
	return fmt.Sprintf(`Lease %s/%s belongs to a FencedShardSet and is written by the fencedlease operator only: user %q may not %s`, ns, name, user, what)
}

// TestShardLease: the Lease of a shard is the record of the shard's grant,
// which the fencing webhook decides by. Nobody but the operator names
// another owner on it, creates one that claims the set, or deletes it: a
// namespace editor could otherwise make their own pod the owner of the
// shard and write what it protects.
func TestShardLease(t *testing.T) {
	f := newFixture(t)
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "work"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "sharded"}}, Shards: 2}}
	f.g.Expect(f.c.Create(f.ctx, set)).To(Succeed())
	f.readyPodWith("w", map[string]string{"app": "sharded"}, 0)
	name := record.ShardLeaseName("work", "0")
	f.g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, l)).To(Succeed())
		g.Expect(record.ParseLease(l.Annotations).Held()).To(BeTrue())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	ref := *metav1.NewControllerRef(set, fencingv1alpha1.GroupVersion.WithKind("FencedShardSet"))
	for i, c := range f.callers() {
		t.Run(c.who, func(t *testing.T) {
			g := NewWithT(t)
			changeIt := "change it"
			if c.who == "standby" {
				changeIt += podRule
			}
			l := f.lease(name)
			l.Spec.HolderIdentity = ptr.To("b")
			l.Annotations[fencingv1alpha1.LeaseAnnotationHolderUID] = string(f.b.UID)
			expectDenied(g, c.c.Update(f.ctx, l), fmt.Sprintf("leases.coordination.k8s.io %q", name), shardLeaseDenied(f.ns, name, c.user, changeIt))
			forgedName := fmt.Sprintf("work-forged-%d", i)
			forged := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: forgedName, OwnerReferences: []metav1.OwnerReference{ref},
				Labels: map[string]string{record.LabelShardSet: "work", record.LabelShard: "1"}}}
			expectDenied(g, c.c.Create(f.ctx, forged), fmt.Sprintf("leases.coordination.k8s.io %q", forgedName), shardLeaseDenied(f.ns, forgedName, c.user, "create it"))
			expectDenied(g, c.c.Delete(f.ctx, f.lease(name)), fmt.Sprintf("leases.coordination.k8s.io %q", name), shardLeaseDenied(f.ns, name, c.user, deleteIt))
		})
	}
	l := f.lease(name)
	f.g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal("w"))
}

func shardSetLabelDenied(ns, pod, user string) string {
	return fmt.Sprintf(`pod %s/%s: label fencedlease.io/shard-set is written by the fencedlease operator only: user %q may not set, change or remove it`, ns, pod, user)
}

// TestShardSetLabel: the operator finds the pods it published shards to by
// their label fencedlease.io/shard-set, also once the set no longer
// selects them. Nobody else sets or removes it: a pod whose label was taken
// off would never be told that its shards are gone.
func TestShardSetLabel(t *testing.T) {
	f := newFixture(t)
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "work"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "sharded"}}, Shards: 2}}
	f.g.Expect(f.c.Create(f.ctx, set)).To(Succeed())
	f.readyPodWith("w", map[string]string{"app": "sharded"}, 0)
	f.g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "w"}, p)).To(Succeed())
		g.Expect(p.Labels).To(HaveKeyWithValue(record.LabelShardSet, "work"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	for _, c := range f.callers() {
		t.Run(c.who, func(t *testing.T) {
			g := NewWithT(t)
			unlabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fencedlease.io/shard-set":null}}}`))
			expectDenied(g, c.c.Patch(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "w"}}, unlabel), `pods "w"`, shardSetLabelDenied(f.ns, "w", c.user))
			label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fencedlease.io/shard-set":"work"}}}`))
			expectDenied(g, c.c.Patch(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "b"}}, label), `pods "b"`, shardSetLabelDenied(f.ns, "b", c.user))
		})
	}
}
