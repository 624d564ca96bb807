package gateway

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

var shardRoute = Route{Bucket: "reports", Prefix: "regions/", Namespace: "billing", FencedShardSet: "exporters"}

func TestShardRoute(t *testing.T) {
	g := NewWithT(t)
	r, err := ShardRoute(shardRoute, "regions/eu/2026-11.csv")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Shard).To(Equal("eu"))
	g.Expect(r.LeaseName()).To(Equal("exporters-eu"))
	g.Expect(r.Lock()).To(Equal(`shard "eu" of FencedShardSet billing/exporters`))

	r, err = ShardRoute(shardRoute, "regions/eu/deep/er/x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Shard).To(Equal("eu"), "the first segment after the prefix, never a later one")

	for key, msg := range map[string]string{
		"regions/eu":        `regions/eu names shard "eu" of FencedShardSet billing/exporters but no object in it: the key must be regions/<shard>/<name>`,
		"regions/eu/":       `regions/eu/ names shard "eu" of FencedShardSet billing/exporters but no object in it: the key must be regions/<shard>/<name>`,
		"regions//x":        `regions//x names no shard of FencedShardSet billing/exporters: the key must be regions/<shard>/<name>`,
		"regions/../eu/x":   `regions/../eu/x: ".." is not a shard of FencedShardSet billing/exporters`,
		"elsewhere/eu/x.cs": `elsewhere/eu/x.cs is not under the prefix "regions/" of FencedShardSet billing/exporters`,
	} {
		_, err := ShardRoute(shardRoute, key)
		g.Expect(err).To(MatchError(msg), key)
	}

	lr, err := ShardRoute(route, "monthly/x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lr).To(Equal(route), "a FencedLease route is left as it is")
	g.Expect(lr.Lock()).To(Equal("FencedLease billing/exporter"))
}

func shardSet() *fencingv1alpha1.FencedShardSet {
	s := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "exporters", UID: "set-uid"}}
	s.Spec.Keys = []string{"eu", "us"}
	return s
}

func shardLease(mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
	return heldLease(func(l *coordinationv1.Lease) {
		l.Name = "exporters-eu"
		l.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(shardSet(), fencingv1alpha1.GroupVersion.WithKind("FencedShardSet"))}
		if mutate != nil {
			mutate(l)
		}
	})
}

func TestReadShardGrant(t *testing.T) {
	g := NewWithT(t)
	got, err := ReadShardGrant(shardLease(nil), shardSet(), "eu")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(Grant{Fence: 42, HolderPod: "b", HolderUID: "uid-b", OwnerUID: "set-uid"}))

	_, err = ReadShardGrant(shardLease(nil), shardSet(), "asia")
	g.Expect(errors.Is(err, ErrNoShard)).To(BeTrue())
	g.Expect(err).To(MatchError(`"asia" is not a shard of FencedShardSet billing/exporters`))

	_, err = ReadShardGrant(nil, shardSet(), "eu")
	g.Expect(err).To(MatchError(`the Lease billing/exporters-eu of shard "eu" does not exist (the shard was never granted)`))

	_, err = ReadShardGrant(shardLease(func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "old-set" }), shardSet(), "eu")
	g.Expect(err).To(MatchError("the Lease billing/exporters-eu is not controlled by FencedShardSet billing/exporters (UID set-uid)"))

	_, err = ReadShardGrant(shardLease(func(l *coordinationv1.Lease) {
		l.Annotations[fencingv1alpha1.LeaseAnnotationState] = fencingv1alpha1.LeaseStatePending
	}), shardSet(), "eu")
	g.Expect(err).To(MatchError("the Lease billing/exporters-eu has no committed grant (state pending)"))

	// A FencedLease's Lease is not a shard's, nor the other way round.
	_, err = ReadGrant(shardLease(nil), "exporters-eu")
	g.Expect(err).To(HaveOccurred())
	_, err = ReadShardGrant(heldLease(nil), shardSet(), "eu")
	g.Expect(err).To(HaveOccurred())
}

func TestAdmitShard(t *testing.T) {
	g := NewWithT(t)
	r, err := ShardRoute(shardRoute, "regions/eu/x.csv")
	g.Expect(err).NotTo(HaveOccurred())
	w := Write{Route: r, Bucket: "reports", Key: "regions/eu/x.csv"}
	g.Expect(Admit(w, holderB, "42", grant, nil)).To(Equal(Decision{Allowed: true, Reason: ReasonHolder, Fence: 42}))
	d := Admit(w, podA, "41", grant, nil)
	g.Expect(d.Message).To(Equal(`write to reports/regions/eu/x.csv with fence 41 denied: stale fence, shard "eu" of FencedShardSet billing/exporters is held with fence 42 by pod b`))

	r.Shard = "asia"
	_, noShard := ReadShardGrant(nil, shardSet(), "asia")
	d = Admit(Write{Route: r, Bucket: "reports", Key: "regions/asia/x.csv"}, holderB, "42", Grant{}, noShard)
	g.Expect(d).To(Equal(Decision{Status: 400, Code: CodeNoSuchShard, Reason: ReasonNoShard, Fence: 42,
		Message: `write to reports/regions/asia/x.csv with fence 42 denied: "asia" is not a shard of FencedShardSet billing/exporters`}))
}
