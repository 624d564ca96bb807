package main

import (
	"strconv"
	"time"

	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestShards: kubectl fence shards shows the set's conditions, each pod's
// share, and every shard's owner, fence and state, and whether its pod was
// told; explain-denial of a shard's object names the shard's owner, and a
// shard's denial is explained.
func TestShards(t *testing.T) {
	f := newFixture(t)
	sharded := map[string]string{"app": "sharded"}
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"a", "b"} {
		pod, err := testenv.CreatePod(f.ctx, env.Client, testenv.Pod{Namespace: f.ns, Name: name, Labels: sharded, ServiceAccount: "default"})
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(testenv.SetReady(f.ctx, env.Client, pod, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
		pods[name] = pod
	}
	set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "work"},
		Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: sharded}, Shards: 4,
			LeaseDurationSeconds: 3, JoinDelaySeconds: ptr.To[int32](0)}}
	f.g.Expect(env.Client.Create(f.ctx, set)).To(Succeed())
	told := map[string]map[string]int64{}
	f.g.Eventually(func(g Gomega) {
		for name := range pods {
			p := &corev1.Pod{}
			g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, p)).To(Succeed())
			s, err := record.ParseShards(p.Annotations[record.AnnotationShards])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s).To(HaveLen(2))
			told[name] = s
		}
		s := &fencingv1alpha1.FencedShardSet{}
		g.Expect(env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "work"}, s)).To(Succeed())
		g.Expect(s.Status.Owned).To(BeEquivalentTo(4))
	}).WithTimeout(timeout).Should(Succeed())

	out, err := f.p.run("shards", "work")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(ContainSubstring("FencedShardSet: " + f.ns + "/work\nShards:  4, 4 owned, 0 moving, over 2 eligible pods"))
	f.g.Expect(out).To(MatchRegexp(`(?m)^Ready:\s+True \(ShardsOwned\): 4 of 4 shards owned by 2 pods$`))
	f.g.Expect(out).To(MatchRegexp(`(?m)^a\s+2$`))
	f.g.Expect(out).To(MatchRegexp(`(?m)^b\s+2$`))
	for name, s := range told {
		for key, fence := range s {
			f.g.Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s+%d\s+held\s+yes$`, key, name, fence))
		}
	}

	// Pod a writes an object of one of its shards; pod b is refused.
	var key string
	var fence int64
	for key, fence = range told["a"] {
		break
	}
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}}}})).To(Succeed())
	f.g.Expect(env.Client.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "default"}}})).To(Succeed())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "part",
		Labels:      map[string]string{fencingv1alpha1.LabelProtectedBy: "work", fencingv1alpha1.LabelShard: key},
		Annotations: map[string]string{fencingv1alpha1.AnnotationFence: strconv.FormatInt(fence, 10)}}}
	owner, err := testenv.PodClient(f.ctx, env.Config, pods["a"])
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(owner.Create(f.ctx, cm)).To(Succeed())
	other, err := testenv.PodClient(f.ctx, env.Config, pods["b"])
	f.g.Expect(err).NotTo(HaveOccurred())
	denied := other.Update(f.ctx, cm)
	f.g.Expect(denied).To(HaveOccurred())

	out, err = f.p.run("explain-denial", denied.Error())
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(HavePrefix("Reason:  not_holder\n"))
	out, err = f.p.run("explain-denial", "configmap/part")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(out).To(Equal("ConfigMap " + f.ns + "/part is protected by shard \"" + key + "\" of FencedShardSet \"work\"; last written with fence " + strconv.FormatInt(fence, 10) + ".\n" +
		"Only pod a, the shard's owner, may write it now, with the annotation fencedlease.io/fence: \"" + strconv.FormatInt(fence, 10) +
		"\"; writes with a lower fence are stale (stale_fence), from other pods not_holder, from non-pods write_not_pod.\n"))

	_, err = f.p.run("shards", "nope")
	f.g.Expect(err).To(MatchError("FencedShardSet " + f.ns + "/nope not found"))
	_, err = f.p.run("shards")
	f.g.Expect(err).To(MatchError(ContainSubstring("shards takes one FencedShardSet name")))
}
