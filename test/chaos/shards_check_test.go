//go:build chaos

package chaos

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The shard checks' tests feed hand-made histories through the recorder, as
// the pod and Lease watches do: go test -tags chaos -run TestCheckShard ./test/chaos

// shardAttempt is write #id of pod's process to the object of shard key of
// set ss, with the fence.
func shardAttempt(id int, pod, key string, fence int64, value string, at int, outcome Outcome, source Source) Attempt {
	return Attempt{ID: id, Process: pod, Pod: pod, PodUID: types.UID("uid-" + pod), Lease: ShardName("ss", key), Set: "ss",
		Object: shardObject("ss", key), Fence: fence, Value: value, Call: time.Duration(at) * ms, Return: time.Duration(at+10) * ms, Outcome: outcome, Source: source}
}

// shardHistory: pod a owns shards 0 (fence 10) and 1 (fence 11); shard 0
// moves to pod b (fence 20) at 500ms. Each writes its shards while it owns
// them; late is appended with the outcome given.
func shardHistory(late ...Attempt) *History {
	r := NewRecorder()
	r.HoldShards("a", "uid-a", "ss", map[string]int64{"0": 10, "1": 11}, 50*ms)
	r.StatusHolder(ShardName("ss", "0"), "a", "uid-a", 10, 40*ms)
	r.StatusHolder(ShardName("ss", "1"), "a", "uid-a", 11, 40*ms)
	r.HoldShards("a", "uid-a", "ss", map[string]int64{"1": 11}, 400*ms)
	r.StatusHolder(ShardName("ss", "0"), "b", "uid-b", 20, 450*ms)
	r.HoldShards("b", "uid-b", "ss", map[string]int64{"0": 20}, 500*ms)
	h := r.History()
	h.Attempts = []Attempt{
		shardAttempt(0, "a", "0", 10, "a/1", 100, Accepted, SourceFresh),
		shardAttempt(1, "a", "1", 11, "a/2", 200, Accepted, SourceFresh),
		shardAttempt(2, "b", "0", 20, "b/1", 600, Accepted, SourceFresh),
	}
	for _, a := range late {
		a.ID = len(h.Attempts)
		h.Attempts = append(h.Attempts, a)
	}
	h.Gaps["*"] = true // no versions recorded: the apply order is not checked here
	h.End = 6000 * ms
	return h
}

func checkShards(t *testing.T, h *History) *Result {
	t.Helper()
	r, err := Check(h, CheckOptions{Window: 100 * ms, Visualization: filepath.Join(t.TempDir(), "porcupine.html")})
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	return r
}

func TestCheckShardClean(t *testing.T) {
	g := NewWithT(t)
	r := checkShards(t, shardHistory(
		shardAttempt(0, "a", "0", 10, "a/3", 3000, Rejected, SourceStale),
		shardAttempt(0, "a", "0", 11, "a/4", 3100, Rejected, SourceImpostor),
	))
	g.Expect(r.Violations).To(BeEmpty())
	s := summarizeShards(shardHistory())
	g.Expect(s.Moves).To(Equal(1), "shard 0 moved from a to b")
	g.Expect(s.Grants).To(Equal(3))
	g.Expect(s.Accepted).To(Equal(3))
}

// The old owner's write with its old fence, accepted after the move.
func TestCheckShardStaleOwnerAccepted(t *testing.T) {
	g := NewWithT(t)
	r := checkShards(t, shardHistory(shardAttempt(0, "a", "0", 10, "a/3", 3000, Accepted, SourceStale)))
	g.Expect(strings.Join(r.Violations, "\n")).To(And(
		ContainSubstring("but the pod did not hold fence 10 of ss/0 then"),
		ContainSubstring("but fence 20 of ss/0 was granted"),
		ContainSubstring("not linearizable"),
	))
}

// A write to shard 0 with the fence of the writer's shard 1, accepted.
func TestCheckShardOtherShardsFenceAccepted(t *testing.T) {
	g := NewWithT(t)
	r := checkShards(t, shardHistory(shardAttempt(0, "a", "0", 11, "a/3", 300, Accepted, SourceImpostor)))
	g.Expect(strings.Join(r.Violations, "\n")).To(ContainSubstring("but the pod did not hold fence 11 of ss/0 then"))
}

// Another pod's fence of a shard, accepted from an impostor.
func TestCheckShardImpostorAccepted(t *testing.T) {
	g := NewWithT(t)
	r := checkShards(t, shardHistory(shardAttempt(0, "c", "0", 20, "c/1", 700, Accepted, SourceImpostor)))
	g.Expect(strings.Join(r.Violations, "\n")).To(ContainSubstring("write #3 by c (pod c) with fence 20 to ss-obj-0 accepted"))
}

// A shard's Lease committing a lower fence than before.
func TestCheckShardGrantFenceGoesBack(t *testing.T) {
	g := NewWithT(t)
	h := shardHistory()
	r := NewRecorder()
	r.StatusHolder(ShardName("ss", "2"), "a", "uid-a", 30, 100*ms)
	r.StatusHolder(ShardName("ss", "2"), "b", "uid-b", 25, 200*ms)
	h.Holdings = append(h.Holdings, r.History().Holdings...)
	res := checkShards(t, h)
	g.Expect(strings.Join(res.Violations, "\n")).To(ContainSubstring("shard ss/2: "))
}

// The fencing webhook's denials of shard writes, as internal/fencing words
// them, and its refusal when it cannot read a shard's Lease.
func TestClassifyShardDenials(t *testing.T) {
	g := NewWithT(t)
	gr := schema.GroupResource{Resource: "configmaps"}
	const head = `admission webhook "protected.fencedlease.io" denied the request: `
	for msg, reason := range map[string]string{
		`ConfigMap ns/o: write with fence 41 rejected: stale holder: shard "3" of FencedShardSet "ss" is at fence 42`:                                                           "stale_fence",
		`ConfigMap ns/o: write with fence 99 rejected: unknown fence: shard "3" of FencedShardSet "ss" is at fence 42`:                                                          "unknown_fence",
		`ConfigMap ns/o: write with fence 42 rejected: pod b is not the holder of shard "3" of FencedShardSet "ss" (holder: pod a, fence 42)`:                                   "not_holder",
		`ConfigMap ns/o: write with fence 42 rejected: shard "3" of FencedShardSet "ss" has no holder (fence 42)`:                                                               "no_holder",
		`ConfigMap ns/o: write with fence 42 rejected: FencedShardSet "ss" has no shard "9": label fencedlease.io/shard must name one of its shards (spec.shards or spec.keys)`: "unknown_shard",
		`ConfigMap ns/o: write with fence 42 rejected: FencedShardSet "ss" not found in namespace ns, so its shard "3" has no holder`:                                           "lease_not_found",
		`get Lease ns/ss-1 of shard "1" of FencedShardSet ss: context canceled`:                                                                                                 "lease_unread",
	} {
		outcome, got := Classify(apierrors.NewForbidden(gr, "o", errors.New(head+msg)))
		g.Expect(outcome).To(Equal(Rejected), msg)
		g.Expect(got).To(Equal(reason), msg)
	}
}
