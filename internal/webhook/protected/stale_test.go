package protected_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestStaleHolderIsRejected is the seeds' scenario: holder A (fence N) stops
// being eligible while its process goes on, B is granted M > N; A's writes
// with N are rejected, before B has written anything (current-fence rule)
// and after (the object keeps M), for a ConfigMap and a Secret.
func TestStaleHolderIsRejected(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	a, _, n, asA, asB := f.holderAndStandby()

	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1 by a"))).To(Succeed())
	f.g.Expect(asA.Create(f.ctx, f.secret("creds", "db", fenceOf(n), "s1 by a"))).To(Succeed())

	// A pauses; meanwhile it is no longer eligible and B is granted at once.
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)

	// A resumes before B has written: the FencedLease is at M.
	stale := fmt.Sprintf(`write with fence %d rejected: stale holder: FencedLease "db" is at fence %d`, n, m)
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n), "v2 by a"), fmt.Sprintf("ConfigMap %s/state: %s", f.ns, stale))
	f.expectDenied(f.writeSecret(asA, "creds", fenceOf(n), "s2 by a"), fmt.Sprintf("Secret %s/creds: %s", f.ns, stale))
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v1 by a", fenceOf(n)}))

	// B writes with M; the stored objects keep M.
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v2 by b")).To(Succeed())
	f.g.Expect(f.writeSecret(asB, "creds", fenceOf(m), "s2 by b")).To(Succeed())
	value, stored = f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))

	// A resumes after B's write: rejected, B's value stays.
	f.expectDenied(f.writeCM(asA, "state", fenceOf(n), "v3 by a"), fmt.Sprintf("ConfigMap %s/state: %s", f.ns, stale))
	f.expectDenied(f.writeSecret(asA, "creds", fenceOf(n), "s3 by a"), fmt.Sprintf("Secret %s/creds: %s", f.ns, stale))
	value, stored = f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))
	value, stored = f.storedSecret("creds")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"s2 by b", fenceOf(m)}))

	f.g.Eventually(func() []string { return f.events("db") }).WithTimeout(timeout).Should(ContainElement(
		fencingv1alpha1.EventStaleWriteRejected + ": " + fmt.Sprintf("ConfigMap %s/state: %s", f.ns, stale)))
}

// TestRegrantedPodDeletesOnlyWhatItsCurrentGrantWrote: pod a holds fence N,
// loses the lease to b (M), which writes the object, and is granted it
// again (K). A delete carries no fence, so a's identity cannot tell its
// process of grant N (paused, then woken) from its process of grant K: a
// delete of what b wrote with M is rejected, and a deletes the object only
// once it has written its current fence K on it.
func TestRegrantedPodDeletesOnlyWhatItsCurrentGrantWrote(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	a, b, n, asA, asB := f.holderAndStandby()
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "v1 by a"))).To(Succeed())

	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, a)).To(Succeed())
	m := f.waitHolder("db", "b", n)
	f.g.Expect(f.writeCM(asB, "state", fenceOf(m), "v2 by b")).To(Succeed())
	f.g.Expect(testenv.SetReady(f.ctx, f.c, a, time.Now().Add(-time.Hour))).To(Succeed())
	f.g.Expect(testenv.SetContainersNotReady(f.ctx, f.c, b)).To(Succeed())
	k := f.waitHolder("db", "a", m)

	obj := fmt.Sprintf("ConfigMap %s/state", f.ns)
	f.expectDenied(asA.Delete(f.ctx, f.configMap("state", "db", "", "")), fmt.Sprintf(
		`%s: delete rejected: the object was last written with fence %d, not with the current fence %d of FencedLease "db": the holder deletes only what carries its current fence (write fencedlease.io/fence=%d on it first, then delete that version)`,
		obj, m, k, k))
	value, stored := f.storedCM("state")
	f.g.Expect([]string{value, stored}).To(Equal([]string{"v2 by b", fenceOf(m)}))

	f.g.Expect(f.writeCM(asA, "state", fenceOf(k), "v3 by a")).To(Succeed())
	f.g.Expect(asA.Delete(f.ctx, f.configMap("state", "db", "", ""))).To(Succeed())
}
