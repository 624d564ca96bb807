package fencedcontroller_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
)

// recordingClient is a sharded client of set "work" in namespace "ns",
// sharded by label "tenant", holding shard "eu" at fence 7, over a fake
// store that records every write sent to it.
func recordingClient(t *testing.T, sent *[]string, objs ...client.Object) (client.Client, client.Client) {
	t.Helper()
	base := fake.NewClientBuilder().WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(clientgoscheme.Scheme)).WithObjects(objs...).Build()
	record := func(verb string, obj client.Object) {
		*sent = append(*sent, verb+" "+obj.GetNamespace()+"/"+obj.GetName())
	}
	inner := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			record("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			record("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			record("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			record("deleteallof", obj)
			return c.DeleteAllOf(ctx, obj, opts...)
		},
	})
	c, err := fencedcontroller.NewShardedClient(inner, fencedcontroller.ClientShardOptions{
		Set: "work", Namespace: "ns", ShardOf: fencedcontroller.ShardByLabel("tenant"),
		Held: func() fence.Shards { return fence.Shards{"eu": 7} }, FieldManager: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, base
}

func refusedUnsent(t *testing.T, what string, err error, sent []string) {
	t.Helper()
	if !errors.Is(err, fencedcontroller.ErrShardNotHeld) || !errors.Is(err, fence.ErrNotHolder) {
		t.Errorf("%s: %v, want a refusal wrapping ErrShardNotHeld and fence.ErrNotHolder", what, err)
	}
	if len(sent) > 0 {
		t.Errorf("%s: sent %v, want nothing sent", what, sent)
	}
}

// A ConfigMap whose TypeMeta says "Event" is a ConfigMap: the client writes
// it as one, so it is no Event, and its writes are checked.
func TestShardedClientJudgesTheKindByTheScheme(t *testing.T) {
	var sent []string
	c, base := recordingClient(t, &sent, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "victim"}})
	ctx := context.Background()
	spoof := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "x"}}
	refusedUnsent(t, "create of a ConfigMap typed Event in another namespace", c.Create(ctx, spoof), sent)
	err := c.DeleteAllOf(ctx, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}}, client.InNamespace("ns"))
	refusedUnsent(t, "delete all of ConfigMaps typed Event", err, sent)
	if err := base.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "victim"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("ConfigMap ns/victim: %v", err)
	}
	if err := c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e"}}); err != nil {
		t.Fatalf("a real Event is sent as it is: %v", err)
	}
}

// A cluster-scoped object is refused even when the caller's copy names the
// set's namespace: the API server would drop the namespace, and the
// fencing webhook checks namespaced objects only.
func TestShardedClientRefusesClusterScopedObjects(t *testing.T) {
	var sent []string
	c, _ := recordingClient(t, &sent)
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tenant-eu", Labels: map[string]string{"tenant": "eu"}}}
	refusedUnsent(t, "create of Namespace tenant-eu", c.Create(context.Background(), n), sent)
}

// A patch of an object stored without its shard's labels is refused before
// it is sent, whatever the caller's copy carries: the webhook would not
// check it.
func TestShardedClientRefusesAPatchOfAnUnlabelledObject(t *testing.T) {
	var sent []string
	c, base := recordingClient(t, &sent, tenant("ns", "plain", "eu"))
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", Labels: map[string]string{
		"tenant": "eu", fencedcontroller.LabelProtectedBy: "work", fencedcontroller.LabelShard: "eu"}}}
	err := c.Patch(context.Background(), mine, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"v"}}`)))
	refusedUnsent(t, "patch of ConfigMap ns/plain stored without labels", err, sent)
	got := &corev1.ConfigMap{}
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(mine), got); err != nil || got.Data["k"] != "" {
		t.Fatalf("ConfigMap ns/plain: %v, data %v", err, got.Data)
	}
}

// An object labelled with a shard stays in it: a patch of the label that
// ShardByLabel reads does not move it, and its owner still writes it.
func TestShardedClientKeepsAnObjectInItsLabelledShard(t *testing.T) {
	var sent []string
	stored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Labels: map[string]string{
		"tenant": "eu", fencedcontroller.LabelProtectedBy: "work", fencedcontroller.LabelShard: "eu"}}}
	c, base := recordingClient(t, &sent, stored)
	ctx := context.Background()
	cur := &corev1.ConfigMap{}
	if err := base.Get(ctx, client.ObjectKeyFromObject(stored), cur); err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(ctx, cur, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"tenant":"us"}}}`))); err != nil {
		t.Fatalf("patch of the tenant label by the owner of shard eu: %v", err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(stored), cur); err != nil {
		t.Fatal(err)
	}
	cur.Data = map[string]string{"k": "v"}
	if err := c.Update(ctx, cur); err != nil {
		t.Fatalf("update by the owner of shard eu after the tenant label became us: %v", err)
	}
	if cur.Labels[fencedcontroller.LabelShard] != "eu" {
		t.Fatalf("the object moved to shard %q", cur.Labels[fencedcontroller.LabelShard])
	}
}
