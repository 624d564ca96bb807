package v1alpha1

import (
	"slices"
	"strconv"
)

// ShardKeys returns the set's shards' keys: spec.keys, or "0" to "N-1" for
// spec.shards N.
func (s *FencedShardSet) ShardKeys() []string {
	if len(s.Spec.Keys) > 0 {
		return slices.Clone(s.Spec.Keys)
	}
	keys := make([]string, s.Spec.Shards)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	return keys
}

// HasShard says whether key names one of the set's shards: one of
// spec.keys, or, when the set counts its shards, a number below spec.shards
// written as ShardKeys writes it (decimal, without a sign or a leading
// zero), so that "07" or "+7" is not taken for shard "7".
func (s *FencedShardSet) HasShard(key string) bool {
	if len(s.Spec.Keys) > 0 {
		return slices.Contains(s.Spec.Keys, key)
	}
	n, err := strconv.ParseInt(key, 10, 64)
	return err == nil && n >= 0 && n < int64(s.Spec.Shards) && strconv.FormatInt(n, 10) == key
}
