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
	// LeasePreviousHolders, on a shard's Lease, lists the pods
	// ("<name>/<uid>", comma-separated) of the committed grants that the
	// current grant replaced and whose marks are not known to have landed:
	// each is marked before the shard is published again.
	LeasePreviousHolders = Prefix + "previous-holders"
	// leasePreviousHolder is the one-name record that operators before
	// previous-holders wrote ("<name>/<uid>"). It is still read, so that a
	// mark owed when the operator was upgraded is not forgotten, and it is
	// dropped whenever previous-holders is written.
	leasePreviousHolder = Prefix + "previous-holder"
)

// Holder names a pod: its name and UID.
type Holder struct{ Name, UID string }

// PreviousHolders reads a shard Lease's previous holders, each once: those
// of previous-holders and the one of the older previous-holder; none when
// neither is there.
func PreviousHolders(annotations map[string]string) []Holder {
	var out []Holder
	values := strings.Split(annotations[LeasePreviousHolders], ",")
	if v, ok := annotations[leasePreviousHolder]; ok {
		values = append(values, v)
	}
	for _, v := range values {
		if name, uid, _ := strings.Cut(v, "/"); name != "" && !slices.Contains(out, Holder{Name: name, UID: uid}) {
			out = append(out, Holder{Name: name, UID: uid})
		}
	}
	return out
}

// SetPreviousHolders records a shard Lease's previous holders, each once,
// or removes the record when there are none.
func SetPreviousHolders(annotations map[string]string, holders []Holder) {
	var vs []string
	seen := map[Holder]bool{}
	for _, h := range holders {
		if h.Name == "" || seen[h] {
			continue
		}
		seen[h] = true
		vs = append(vs, h.Name+"/"+h.UID)
	}
	delete(annotations, leasePreviousHolder)
	if len(vs) == 0 {
		delete(annotations, LeasePreviousHolders)
		return
	}
	annotations[LeasePreviousHolders] = strings.Join(vs, ",")
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
