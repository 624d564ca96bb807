package v1alpha1

import (
	"slices"
	"testing"
)

func TestShardKeys(t *testing.T) {
	counted := &FencedShardSet{Spec: FencedShardSetSpec{Shards: 12}}
	listed := &FencedShardSet{Spec: FencedShardSetSpec{Keys: []string{"eu", "us"}}}
	if got := counted.ShardKeys(); len(got) != 12 || got[0] != "0" || got[11] != "11" {
		t.Fatalf("keys of 12 shards: %v, want 0 to 11", got)
	}
	if got := listed.ShardKeys(); !slices.Equal(got, []string{"eu", "us"}) {
		t.Fatalf("keys of a listed set: %v", got)
	}
	for _, tc := range []struct {
		set  *FencedShardSet
		key  string
		want bool
	}{
		{counted, "0", true}, {counted, "11", true}, {counted, "12", false}, {counted, "-1", false},
		{counted, "07", false}, {counted, "+7", false}, {counted, "7 ", false}, {counted, "", false},
		{listed, "eu", true}, {listed, "0", false}, {listed, "EU", false},
	} {
		if got := tc.set.HasShard(tc.key); got != tc.want {
			t.Errorf("HasShard(%q) of %v: %v, want %v", tc.key, tc.set.Spec, got, tc.want)
		}
	}
}
