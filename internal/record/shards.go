package record

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The records of a shard set.
const (
	// LabelShardSet and LabelShard mark a shard's Lease with its set and
	// its key; LabelShardSet marks the set's candidate pods the operator
	// published to. LabelShard, beside LabelProtectedBy, marks an object
	// protected by a shard.
	LabelShardSet = Prefix + "shard-set"
	LabelShard    = Prefix + "shard"
	// AnnotationShards is a candidate pod's shards with their fences.
	AnnotationShards = Prefix + "shards"
	// AnnotationShardsMark, on a pod, changes whenever the operator marks
	// the pod: after a shard it owned moved on, before the shard is
	// published to its new owner.
	AnnotationShardsMark = Prefix + "shards-mark"
	// LeasePreviousHolder, on a shard's Lease, names the pod
	// ("<name>/<uid>") whose committed grant the current grant replaced.
	LeasePreviousHolder = Prefix + "previous-holder"
)

// PreviousHolder reads a shard Lease's previous holder: the pod whose
// committed grant the current one replaced; "" when none.
func PreviousHolder(annotations map[string]string) (name, uid string) {
	name, uid, _ = strings.Cut(annotations[LeasePreviousHolder], "/")
	return name, uid
}

// SetPreviousHolder records a shard Lease's previous holder, or removes
// the record when name is "".
func SetPreviousHolder(annotations map[string]string, name, uid string) {
	if name == "" {
		delete(annotations, LeasePreviousHolder)
		return
	}
	annotations[LeasePreviousHolder] = name + "/" + uid
}

// ShardLeaseName is the name of the Lease that records a shard's grant.
func ShardLeaseName(set, key string) string { return set + "-" + key }

// ParseShards reads a pod's AnnotationShards: the shards it owns and
// their fences. An empty value is no shard. Anything else that is not a
// JSON object of keys to canonical fences is an error that names the
// first bad entry, so that a workload never acts on a shard it cannot
// read.
func ParseShards(value string) (map[string]int64, error) {
	out := map[string]int64{}
	if strings.TrimSpace(value) == "" {
		return out, nil
	}
	var raw map[string]string
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return nil, fmt.Errorf("shards %q: not a JSON object of shard to fence: %w", value, err)
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if k == "" {
			return nil, fmt.Errorf("shards %q: a shard has no key", value)
		}
		n, err := ParseFence(raw[k])
		if err != nil {
			return nil, fmt.Errorf("shards: shard %q: %w", k, err)
		}
		out[k] = n
	}
	return out, nil
}

// FormatShards writes the AnnotationShards value of a pod that owns
// shards; "" when it owns none. The keys are sorted, so one set of shards
// always has one value and an unchanged set is not written again.
func FormatShards(shards map[string]int64) string {
	if len(shards) == 0 {
		return ""
	}
	raw := make(map[string]string, len(shards))
	for k, n := range shards {
		raw[k] = FormatFence(n)
	}
	b, _ := json.Marshal(raw) // a map of strings always marshals, sorted by key
	return string(b)
}
