package sim_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/sim"
)

// publishForged makes pod b of a world where pod a holds FencedLease db
// published as holder with fence, as a user with edit rights on pods may
// (the world writes it), and returns the checker's violations and a's fence.
func publishForged(t *testing.T, fence func(held int64) int64) ([]string, int64) {
	t.Helper()
	g := NewWithT(t)
	sc, err := sim.NewScript(1, indexes(), reconciler)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sc.FencedLease("db", app, immediate)).To(Succeed())
	g.Expect(sc.Pod("a", "n0", app, time.Hour)).To(Succeed())
	g.Expect(sc.Pod("b", "n1", app, time.Hour)).To(Succeed())
	held := holds(g, sc, "a")
	g.Expect(sc.Violations()).To(BeEmpty())
	g.Expect(sc.Annotate("b", fencingv1alpha1.AnnotationLease, "db")).To(Succeed())
	g.Expect(sc.Annotate("b", fencingv1alpha1.AnnotationRole, fencingv1alpha1.RoleHolder)).To(Succeed())
	g.Expect(sc.Violations()).To(BeEmpty(), "no fence, no holder")
	g.Expect(sc.Annotate("b", fencingv1alpha1.AnnotationFence, strconv.FormatInt(fence(held), 10))).To(Succeed())
	return sc.Violations(), held
}

// TestCheckerSeesTheHoldersFenceForged: the checker reports a second pod
// published with the holder's fence while the holder holds.
func TestCheckerSeesTheHoldersFenceForged(t *testing.T) {
	v, held := publishForged(t, func(held int64) int64 { return held })
	f := strconv.FormatInt(held, 10)
	NewWithT(t).Expect(v).To(ConsistOf(
		And(ContainSubstring("pod b got fence "+f+" of FencedLease db, which was published to pod a (UID "), ContainSubstring("after a write by world")),
		ContainSubstring("2 pods published as holder of FencedLease db at once: [a(fence "+f+") b(fence "+f+")]"),
	))
}

// TestCheckerSeesAnOlderFenceForged: the checker reports a fence below the
// one published, never committed either.
func TestCheckerSeesAnOlderFenceForged(t *testing.T) {
	v, held := publishForged(t, func(held int64) int64 { return held - 1 })
	f, older := strconv.FormatInt(held, 10), strconv.FormatInt(held-1, 10)
	NewWithT(t).Expect(v).To(ConsistOf(
		ContainSubstring("pod b got fence "+older+" of FencedLease db after fence "+f+" was published"),
		ContainSubstring("world published fence "+older+" of FencedLease db to pod b, but that fence was never committed on the Lease"),
		ContainSubstring("2 pods published as holder of FencedLease db at once"),
	))
}

// admitAll is a fencing webhook that admits every write.
type admitAll struct{}

func (admitAll) Handle(context.Context, admission.Request) admission.Response {
	return admission.Allowed("")
}

// TestCheckerSeesAWebhookThatAdmitsAll: with a webhook that admits every
// write, stale holders' and impostors' writes are admitted, and the checker
// says so (Grants.Stale and Grants.GrantedTo on the webhook's decisions).
func TestCheckerSeesAWebhookThatAdmitsAll(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		cfg := config(seed)
		cfg.NewWebhook = func(sim.WebhookClients) admission.Handler { return admitAll{} }
		for _, v := range sim.Run(cfg, indexes(), reconcilerFor(seed)).Violations {
			if strings.Contains(v, "the webhook admitted") {
				return
			}
		}
	}
	t.Fatal("in 40 seeds, the checker saw no write the webhook should have denied")
}
