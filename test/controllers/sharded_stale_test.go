package controllers_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// TestShardedClientChecksTheStoredLabels: a pod that holds no shard, whose
// client believes (a stale shards file) that it holds the shards of two
// Widgets stored without shard labels. Its Update is denied by the webhook
// (the client labelled it, the fence is stale), and leaves the labels on the
// caller's copy; a status write with that copy, and a patch of the other
// Widget with labels on the caller's copy alone, would reach objects the
// webhook does not check: the client refuses both before sending, since it
// reads the stored labels from the API server.
func TestShardedClientChecksTheStoredLabels(t *testing.T) {
	f := newFixture(t)
	f.startOperator()
	f.createShardSet()
	pod, err := testenv.CreatePod(f.ctx, admin, testenv.Pod{Namespace: f.ns, Name: "stale",
		Labels: map[string]string{"app": "not-in-set"}, ServiceAccount: "default"})
	f.g.Expect(err).NotTo(HaveOccurred())
	token, err := testenv.PodToken(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	inner, err := client.New(cfg, client.Options{Scheme: scheme})
	f.g.Expect(err).NotTo(HaveOccurred())
	shardOf := fencedcontroller.ShardByName(shardCount)
	keyPlain, _ := shardOf(&examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	keyProt, _ := shardOf(&examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "prot"}})
	c, err := fencedcontroller.NewShardedClient(inner, fencedcontroller.ClientShardOptions{
		Set: shardedSet, Namespace: f.ns, ShardOf: shardOf, FieldManager: "stale",
		Held: func() fence.Shards { return fence.Shards{keyPlain: 1, keyProt: 1} },
	})
	f.g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"plain", "prot"} {
		f.g.Expect(admin.Create(f.ctx, &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}})).To(Succeed())
	}

	prot := &examplesv1alpha1.Widget{}
	f.g.Expect(admin.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "prot"}, prot)).To(Succeed())
	prot.Spec.Message = "by stale"
	f.g.Expect(c.Update(f.ctx, prot)).To(MatchError(ContainSubstring("denied the request")), "the webhook denies the stale update")
	f.g.Expect(prot.Labels).To(HaveKeyWithValue(fencedcontroller.LabelShard, keyProt), "the refused Update left the labels on the caller's copy")
	prot.Status.Holder = "stale"
	err = c.Status().Update(f.ctx, prot)
	f.g.Expect(errors.Is(err, fencedcontroller.ErrShardNotHeld)).To(BeTrue(), "status write of a Widget stored without labels: %v", err)
	f.g.Expect(err).To(MatchError(ContainSubstring("stored without the labels")))

	plain := &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain",
		Labels: map[string]string{fencedcontroller.LabelProtectedBy: shardedSet, fencedcontroller.LabelShard: keyPlain}}}
	err = c.Patch(f.ctx, plain, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"message":"by stale"}}`)))
	f.g.Expect(errors.Is(err, fencedcontroller.ErrShardNotHeld)).To(BeTrue(), "patch of a Widget stored without labels: %v", err)

	for _, name := range []string{"plain", "prot"} {
		w := &examplesv1alpha1.Widget{}
		f.g.Expect(admin.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, w)).To(Succeed())
		f.g.Expect(w.Spec.Message).To(BeEmpty(), "Widget %s written by a pod that holds no shard", name)
		f.g.Expect(w.Status.Holder).To(BeEmpty(), "Widget %s written by a pod that holds no shard", name)
	}
}
