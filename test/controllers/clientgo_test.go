//go:build clientgo

package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestClientGoControllerPausedPastItsLease is the same split brain as
// TestFencedControllerPausedPastItsDeadline, with the same controller on
// controller-runtime's stock leader election (a Lease lock, 15 s lease,
// 10 s renew deadline, 2 s retry period) and Widgets that no webhook
// guards: replica a leads and writes, is stopped until b has taken the
// lease and written every Widget, then continued, and writes on for
// several seconds. Its late writes are accepted, and the slots it hands
// out from its stale view overwrite b's. It runs only with the build tag
// clientgo (make test-controllers-clientgo): the lease alone takes 15 s.
func TestClientGoControllerPausedPastItsLease(t *testing.T) {
	f := newFixture(t)
	f.g.Expect(admin.Create(f.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "leader-election"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	})).To(Succeed())
	f.g.Expect(admin.Create(f.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "leader-election"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leader-election"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "default"}},
	})).To(Succeed())
	a, b := f.pod("a"), f.pod("b")
	f.ready(a, time.Hour)
	f.ready(b, time.Minute)
	f.widgets(3)
	args := []string{"--leader-elect", "--resync=500ms", "--late-writes=" + lateWrites.String()}
	ra := f.startReplica(a, args...)
	f.waitWidgets("a", -1, timeout)
	rb := f.startReplica(b, args...)
	f.g.Eventually(func() bool { return rb.logged("Attempting to acquire leader lease") }).WithTimeout(timeout).Should(BeTrue())
	f.g.Expect(rb.writes()).To(BeEmpty(), "b's controller wrote before b led")

	pausedAt := time.Now()
	f.g.Expect(ra.freeze()).To(Succeed())
	f.waitWidgets("b", -1, 2*timeout)
	time.Sleep(time.Second) // b writes on
	resumedAt := time.Now()
	f.g.Expect(ra.thaw()).To(Succeed())
	code, err := ra.waitExit(lateWrites + timeout)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(code).To(Equal(1))
	f.g.Expect(ra.logged("leader election lost")).To(BeTrue(), "a's manager reports a lost election")

	run := judge(ra, pausedAt, resumedAt)
	run.Overwritten = f.overwritten()
	t.Logf("client-go: %s", run)
	testenv.WriteResult(t, "CONTROLLERS_CLIENTGO_RESULT", run)

	// The split brain: nothing stops the late writes of a replica that
	// lost its lease.
	f.g.Expect(run.Late["accepted"]).To(BeNumerically(">=", 20))
	f.g.Expect(run.Late["rejected"] + run.Late["refused"]).To(BeZero())
	f.g.Expect(run.Overwritten).To(BeNumerically(">", 0), "a's stale slots overwrote b's")
}
