//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// electorImage is client-go's leader election in a container (test/elector).
const electorImage = "fencedlease.local/elector:dev"

// handoffTimes are one system's handoffs, each from the holder pod's
// deletion: to the new holder in the API (published), to the new holder's
// process knowing (its log line), and to the old holder's process being
// told to stop.
type handoffTimes struct{ published, knows, told []time.Duration }

func (h handoffTimes) String() string {
	return fmt.Sprintf("published %s; new process knows %s; old process told %s", quantiles(h.published), quantiles(h.knows), quantiles(h.told))
}

// knowsRounds is KNOWS_ROUNDS (handoffs per system), 2 by default.
func knowsRounds() int {
	if v, err := strconv.Atoi(os.Getenv("KNOWS_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 2
}

// TestProcessKnows measures, on the real node, when the processes know of a
// handoff: the holder pod is deleted (its containers get the kubelet's
// SIGTERM) and a standby takes over. Side by side, with the same pods and
// the same deletion: fencedlease (takeover Immediate, lease 15 s, the work
// under fence run reading the kubelet's files) and client-go's leader
// election (its usual 15 s lease, 2 s retry), with and without
// ReleaseOnCancel. Times come from the container runtime's log of each
// process; the figures are logged, never asserted (docs/benchmarks.md). It
// asserts what must hold: every handoff happens, fences grow, and the new
// process starts with the fence it was granted.
func TestProcessKnows(t *testing.T) {
	needRealNode(t)
	rounds := knowsRounds()
	fenced := fencedHandoffs(t, rounds)
	t.Logf("fencedlease (Immediate, 15s lease), %d handoffs: %s", rounds, fenced)
	released := electorHandoffs(t, rounds, true)
	t.Logf("client-go, ReleaseOnCancel, %d handoffs: %s", rounds, released)
	kept := electorHandoffs(t, rounds, false)
	t.Logf("client-go, defaults (the Lease kept on SIGTERM), %d handoffs: %s", rounds, kept)
}

func fencedHandoffs(t *testing.T, rounds int) handoffTimes {
	g := NewWithT(t)
	w := newWorkspaceWith(t, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		fl.Spec.LeaseDurationSeconds = 15
	})
	script := `exec /fence run --grace-period 2s -- /bin/sh -c 'echo "started $FENCE_TOKEN"; trap "echo told; exit 0" TERM; while :; do sleep 0.05; done'`
	w.realPod(t, "knows-0", script)
	w.realPod(t, "knows-1", script)
	var out handoffTimes
	for i := range rounds {
		h, fence := w.holder()
		w.logLine(t, h, fmt.Sprintf("started %d", fence))
		time.Sleep(quiet)
		told := watchLine(h, "told")
		t0 := time.Now()
		g.Expect(admin.Delete(context.Background(), h)).To(Succeed())
		var next *corev1.Pod
		var nextFence int64
		g.Eventually(func() bool {
			p, f, ok, err := holderNow(w)
			next, nextFence = p, f
			return err == nil && ok && p.UID != h.UID
		}).WithTimeout(timeout).WithPolling(5*time.Millisecond).Should(BeTrue(), "round %d: a standby takes over", i)
		out.published = append(out.published, time.Since(t0))
		g.Expect(nextFence).To(BeNumerically(">", fence))
		out.knows = append(out.knows, w.logLine(t, next, fmt.Sprintf("started %d", nextFence)).Sub(t0))
		out.told = append(out.told, told(t).Sub(t0))
		if testing.Verbose() {
			t.Logf("fencedlease round %d: fence %d to %d, published %s, knows %s", i, fence, nextFence,
				out.published[i].Round(time.Millisecond), out.knows[i].Round(time.Millisecond))
		}
		w.realPod(t, fmt.Sprintf("knows-%d", i+2), script)
	}
	return out
}

func electorHandoffs(t *testing.T, rounds int, release bool) handoffTimes {
	g := NewWithT(t)
	w := newWorkspace(t, false)
	g.Expect(admin.Create(context.Background(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "elector"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"},
			Verbs: []string{"get", "create", "update"}}},
	})).To(Succeed())
	g.Expect(admin.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "elector"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "elector"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "default"}},
	})).To(Succeed())
	elector := func(name string) *corev1.Pod {
		return w.realPodWith(t, name, "", func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "elector"}
			c := &p.Spec.Containers[0]
			c.Image, c.Command = electorImage, nil
			c.Args = []string{"--lease=elector", "--namespace=" + w.ns, "--identity=" + name, "--release-on-cancel=" + strconv.FormatBool(release)}
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
		})
	}
	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"elector-0", "elector-1"} {
		pods[n] = elector(n)
	}
	leader := func() string {
		l := &coordinationv1.Lease{}
		if admin.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "elector"}, l) != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var out handoffTimes
	for i := range rounds {
		var h string
		g.Eventually(func() string { h = leader(); return h }).WithTimeout(timeout).WithPolling(poll).ShouldNot(BeEmpty())
		w.logLine(t, pods[h], "leading")
		time.Sleep(quiet)
		told := watchLine(pods[h], "stopped leading")
		t0 := time.Now()
		g.Expect(admin.Delete(context.Background(), pods[h])).To(Succeed())
		var next string
		g.Eventually(func() bool {
			next = leader()
			return next != "" && next != h
		}).WithTimeout(timeout).WithPolling(5*time.Millisecond).Should(BeTrue(), "round %d: another candidate leads", i)
		out.published = append(out.published, time.Since(t0))
		out.knows = append(out.knows, w.logLine(t, pods[next], "leading").Sub(t0))
		out.told = append(out.told, told(t).Sub(t0))
		n := fmt.Sprintf("elector-%d", i+2)
		pods[n] = elector(n)
	}
	return out
}

// watchLine starts reading the pod's log for the line text at once, before
// the pod is deleted: the kubelet removes a stopped container's log with the
// container, soon after it stops. The function returned waits for the
// line and returns when the container runtime read it.
func watchLine(pod *corev1.Pod, text string) func(t *testing.T) time.Time {
	found := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			if at := firstLine(pod, text); !at.IsZero() {
				found <- at
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(found)
	}()
	return func(t *testing.T) time.Time {
		t.Helper()
		at, ok := <-found
		if !ok {
			t.Fatalf("pod %s did not write %q in %s", pod.Name, text, timeout)
		}
		return at
	}
}
