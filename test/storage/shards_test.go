package storage_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// shardOwner waits until the operator has committed a grant of shard key
// to one of pods, and returns that pod and the fence.
func shardOwner(g Gomega, ns, set, key string, pods ...*corev1.Pod) (*corev1.Pod, int64) {
	var owner *corev1.Pod
	var f int64
	g.Eventually(func(g Gomega) {
		s := &fencingv1alpha1.FencedShardSet{}
		g.Expect(env.Client.Get(context.Background(), keyOf(ns, set), s)).To(Succeed())
		l := &coordinationv1.Lease{}
		g.Expect(env.Client.Get(context.Background(), keyOf(ns, record.ShardLeaseName(set, key)), l)).To(Succeed())
		gr, err := gateway.ReadShardGrant(l, s, key)
		g.Expect(err).NotTo(HaveOccurred())
		owner = nil
		for _, p := range pods {
			if p.UID == gr.HolderUID {
				owner = p
			}
		}
		g.Expect(owner).NotTo(BeNil(), "shard %s held by %s", key, gr.HolderPod)
		f = gr.Fence
	}).WithTimeout(timeout).Should(Succeed())
	return owner, f
}

// TestShardRoutes: a route names a FencedShardSet; the first segment after
// its prefix is the shard. Pod a owns both shards, then pod b joins and one
// shard moves to it. Only a shard's current owner writes under the shard,
// with the shard's current fence: the other pod, the old owner after the
// move (with its old fence or the new one), another shard's fence, a key
// that is not a shard and a ".." path into another shard are all refused,
// with S3 errors naming the shard and the set; reads pass through.
func TestShardRoutes(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "gwshards")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "exporters"}
	g.Expect(env.Client.Create(ctx, &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exporters"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: labels}, Keys: []string{"eu", "us"},
			LeaseDurationSeconds: 5, JoinDelaySeconds: ptr.To[int32](0)}})).To(Succeed())
	a := readyPod(t, ns, "a", labels, time.Hour)
	_, euA := shardOwner(g, ns, "exporters", "eu", a)
	_, usA := shardOwner(g, ns, "exporters", "us", a)
	aTok, err := testenv.PodToken(ctx, env.Config, a)
	g.Expect(err).NotTo(HaveOccurred())
	gw := startGateway(t, []gateway.Route{{Bucket: bucket, Prefix: "regions/", Namespace: ns, FencedShardSet: "exporters"}}, nil)
	url := func(key string) string { return gw.URL + "/" + bucket + "/" + key }
	as := func(token string, fence int64) map[string]string {
		return map[string]string{gateway.HeaderToken: token, gateway.HeaderFence: strconv.FormatInt(fence, 10)}
	}
	put := func(token string, fence int64, key, body string) (int, s3Error) {
		status, _, resp := raw(g, http.MethodPut, url(key), as(token, fence), body)
		if status == http.StatusOK {
			return status, s3Error{}
		}
		return status, errorOf(g, resp)
	}
	content := func(key string) string {
		status, _, body := raw(g, http.MethodGet, url(key), map[string]string{gateway.HeaderToken: aTok}, "")
		if status != http.StatusOK {
			return "<" + strconv.Itoa(status) + ">"
		}
		return body
	}

	// The owner of both shards writes each with its fence.
	status, e := put(aTok, euA, "regions/eu/report.csv", "a-eu")
	g.Expect(status).To(Equal(http.StatusOK), e.Message)
	status, e = put(aTok, usA, "regions/us/report.csv", "a-us")
	g.Expect(status).To(Equal(http.StatusOK), e.Message)

	// b joins; one shard moves to it.
	b := readyPod(t, ns, "b", labels, time.Minute)
	bTok, err := testenv.PodToken(ctx, env.Config, b)
	g.Expect(err).NotTo(HaveOccurred())
	var moved, kept string
	var movedOld, keptFence int64
	g.Eventually(func() bool {
		for _, k := range []string{"eu", "us"} {
			if owner, _ := shardOwner(g, ns, "exporters", k, a, b); owner == b {
				moved = k
				return true
			}
		}
		return false
	}).WithTimeout(timeout).Should(BeTrue(), "a shard moves to b")
	kept, movedOld, keptFence = "us", euA, usA
	if moved == "us" {
		kept, movedOld, keptFence = "eu", usA, euA
	}
	_, movedNew := shardOwner(g, ns, "exporters", moved, b)
	_, keptNow := shardOwner(g, ns, "exporters", kept, a)
	g.Expect(keptNow).To(Equal(keptFence), "shard %s did not move", kept)
	movedKey := "regions/" + moved + "/report.csv"
	lockOf := `shard "` + moved + `" of FencedShardSet ` + ns + `/exporters`

	// The new owner writes with the shard's new fence.
	status, e = put(bTok, movedNew, movedKey, "b")
	g.Expect(status).To(Equal(http.StatusOK), e.Message)

	// The old owner, with its old fence: stale.
	status, e = put(aTok, movedOld, movedKey, "a-late")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Code).To(Equal(gateway.CodeStaleFence))
	g.Expect(e.Message).To(ContainSubstring("stale fence, " + lockOf + " is held with fence " + strconv.FormatInt(movedNew, 10) + " by pod b"))
	// The old owner with the new fence: not the owner.
	status, e = put(aTok, movedNew, movedKey, "a-late")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Code).To(Equal(gateway.CodeNotHolder))
	g.Expect(e.Message).To(ContainSubstring("pod a (UID " + string(a.UID) + ") is not the holder, " + lockOf))
	// b, under the shard a kept, with its own shard's fence: not the owner
	// there, and a fence that shard never granted or an old one.
	status, e = put(bTok, movedNew, "regions/"+kept+"/report.csv", "b-wrong-shard")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Code).To(BeElementOf(gateway.CodeStaleFence, gateway.CodeUnknownFence, gateway.CodeNotHolder))
	g.Expect(e.Message).To(ContainSubstring(`shard "` + kept + `" of FencedShardSet ` + ns + `/exporters`))
	// a, under the shard it kept, with the moved shard's old fence: refused.
	status, e = put(aTok, movedOld, "regions/"+kept+"/report.csv", "a-other-fence")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Code).To(BeElementOf(gateway.CodeStaleFence, gateway.CodeUnknownFence))
	// b, under the shard it owns, with the kept shard's fence: refused.
	status, e = put(bTok, keptFence, movedKey, "b-other-fence")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Code).To(BeElementOf(gateway.CodeStaleFence, gateway.CodeUnknownFence))

	// The shard is the first segment after the prefix, never a later one:
	// b's shard's name deeper in a key of a's shard does not make it b's.
	status, e = put(bTok, movedNew, "regions/"+kept+"/"+moved+"/report.csv", "b-nested")
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(e.Message).To(ContainSubstring(`shard "` + kept + `" of FencedShardSet ` + ns + `/exporters`))

	// A key that is not a shard of the set, and a path without a shard.
	status, e = put(aTok, keptFence, "regions/asia/report.csv", "nowhere")
	g.Expect(status).To(Equal(http.StatusBadRequest))
	g.Expect(e.Code).To(Equal(gateway.CodeNoSuchShard))
	g.Expect(e.Message).To(ContainSubstring(`"asia" is not a shard of FencedShardSet ` + ns + `/exporters`))
	status, e = put(aTok, keptFence, "regions/"+kept, "no-object")
	g.Expect(status).To(Equal(http.StatusBadRequest))
	g.Expect(e.Code).To(Equal(gateway.CodeNoSuchShard))
	g.Expect(e.Message).To(ContainSubstring("the key must be regions/<shard>/<name>"))

	// The old owner climbs from the shard it kept into the moved one.
	for _, path := range []string{
		"regions/" + kept + "/../" + moved + "/report.csv",
		"regions/" + kept + "/%2E%2E/" + moved + "/report.csv",
		"regions/" + kept + "%2F..%2F" + moved + "/report.csv",
	} {
		status, e = put(aTok, keptFence, path, "climbed")
		g.Expect(status).To(Equal(http.StatusBadRequest), path)
		g.Expect(e.Code).To(Equal(gateway.CodeInvalidURI), path)
	}

	// Nothing refused was written; the owners' writes are there.
	g.Expect(content(movedKey)).To(Equal("b"))
	g.Expect(content("regions/" + kept + "/report.csv")).To(Equal("a-" + kept))
	g.Expect(content("regions/asia/report.csv")).To(Equal("<404>"))
	g.Expect(content("regions/" + kept + "/" + moved + "/report.csv")).To(Equal("<404>"))
}
