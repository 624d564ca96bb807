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

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
)

// shardedClient is a sharded client of set "work" in namespace "ns",
// sharded by label "tenant", holding shard "eu" at fence 7.
func shardedClient(t *testing.T) (client.Client, client.Client) {
	t.Helper()
	inner := fake.NewClientBuilder().WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(clientgoscheme.Scheme)).Build()
	c, err := fencedcontroller.NewShardedClient(inner, fencedcontroller.ClientShardOptions{
		Set: "work", Namespace: "ns", ShardOf: fencedcontroller.ShardByLabel("tenant"),
		Held: func() fence.Shards { return fence.Shards{"eu": 7} }, FieldManager: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, inner
}

func tenant(ns, name, key string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"tenant": key}}}
}

// TestShardedClientStampsAndLabelsHeldShards: a create of an object of a
// held shard is labelled with the set and the shard, and stamped with the
// shard's fence.
func TestShardedClientStampsAndLabelsHeldShards(t *testing.T) {
	c, inner := shardedClient(t)
	ctx := context.Background()
	if err := c.Create(ctx, tenant("ns", "a", "eu")); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := inner.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[fencedcontroller.LabelProtectedBy] != "work" || got.Labels[fencedcontroller.LabelShard] != "eu" {
		t.Errorf("labels %v: want protected by work, shard eu", got.Labels)
	}
	if got.Annotations[fence.Annotation] != "7" {
		t.Errorf("fence annotation %q: want 7", got.Annotations[fence.Annotation])
	}
}

// TestShardedClientRefusesWritesOutsideHeldShards: every write it cannot
// tie to a held shard is refused unsent, naming the object; Events pass.
func TestShardedClientRefusesWritesOutsideHeldShards(t *testing.T) {
	ctx := context.Background()
	for name, write := range map[string]func(c client.Client) error{
		"a shard not held":  func(c client.Client) error { return c.Create(ctx, tenant("ns", "x", "us")) },
		"no shard":          func(c client.Client) error { return c.Create(ctx, tenant("ns", "x", "")) },
		"another namespace": func(c client.Client) error { return c.Create(ctx, tenant("other", "x", "eu")) },
		"another protector": func(c client.Client) error {
			o := tenant("ns", "x", "eu")
			o.Labels[fencedcontroller.LabelProtectedBy] = "l"
			return c.Create(ctx, o)
		},
		"a patch unlabelled": func(c client.Client) error {
			return c.Patch(ctx, tenant("ns", "x", "eu"), client.RawPatch(types.MergePatchType, []byte(`{}`)))
		},
		"a status unlabelled": func(c client.Client) error { return c.Status().Update(ctx, tenant("ns", "x", "eu")) },
		"a delete unlabelled": func(c client.Client) error { return c.Delete(ctx, tenant("ns", "x", "eu")) },
		"delete all of":       func(c client.Client) error { return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("ns")) },
	} {
		t.Run(name, func(t *testing.T) {
			c, inner := shardedClient(t)
			err := write(c)
			if !errors.Is(err, fencedcontroller.ErrShardNotHeld) || !errors.Is(err, fence.ErrNotHolder) {
				t.Fatalf("err = %v: want ErrShardNotHeld and fence.ErrNotHolder", err)
			}
			list := &corev1.ConfigMapList{}
			if err := inner.List(ctx, list); err != nil || len(list.Items) != 0 {
				t.Errorf("written: %v, %v", list.Items, err)
			}
		})
	}
	c, _ := shardedClient(t)
	if err := c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "e"}}); err != nil {
		t.Errorf("an Event: %v", err)
	}
}
