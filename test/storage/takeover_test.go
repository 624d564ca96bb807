package storage_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/s3server"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// handover is a FencedLease (Immediate takeover) with A holding it and B
// ready to take over, in a bucket of its own.
type handover struct {
	ns, bucket string
	a, b       *tenant
}

func newHandover(t *testing.T, prefix string) *handover {
	t.Helper()
	g := NewWithT(t)
	ns := namespace(t, prefix)
	g.Expect(store.CreateBucket(context.Background(), ns)).To(Succeed())
	tn := newTenant(t, ns, "exporter", func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
		fl.Spec.LeaseDurationSeconds = 3
	})
	return &handover{ns: ns, bucket: ns, a: tn}
}

func (h *handover) routes() []gateway.Route {
	return []gateway.Route{{Bucket: h.bucket, Namespace: h.ns, FencedLease: "exporter"}}
}

// takeover makes A's containers not ready and waits for B's grant: B is
// the standby pod, with its own token and the new fence.
func (h *handover) takeover(g Gomega) time.Time {
	g.Expect(setNotReady(h.a)).To(Succeed())
	b := &tenant{ns: h.ns, name: "exporter", holder: h.a.standby, hTok: h.a.sTok}
	b.fence = grantOf(g, h.ns, "exporter", b.holder)
	h.b = b
	return time.Now()
}

// url is the object's URL through a gateway.
func (h *handover) url(gw *testGateway, key string) string {
	return gw.URL + "/" + h.bucket + "/" + key
}

// expectTombstone checks that the store keeps key's deletion with B's
// fence, and that through the gateway the object is absent.
func (h *handover) expectTombstone(g Gomega, gw *testGateway, key string) {
	content, meta := storedObject(context.Background(), h.bucket, key)
	g.Expect(content).To(Equal(string(gateway.TombstoneBody(h.b.fence))), "the deletion keeps B's fence")
	g.Expect(meta).To(Equal(map[string]string{gateway.MetaFence: strconv.FormatInt(h.b.fence, 10), gateway.MetaDeleted: "true"}))
	status, _, body := raw(g, http.MethodGet, h.url(gw, key), as(h.b.hTok, ""), "")
	g.Expect(status).To(Equal(http.StatusNotFound), body)
}

// TestDeletionKeepsItsFence: a create conditional on absence, admitted for
// A (fence FA) before the grant moved, cannot land after B (FB > FA)
// created and deleted the object: the deletion left a tombstone with FB,
// so the create's If-None-Match fails at the store, and a retry is stale.
//
//   - two replicas (finding 3): A's create is held between replica 1 and
//     the store while B creates and deletes through replica 2;
//   - one replica (finding 2): A's create went to an alias of the key
//     (/bucket/./marker, another lock key before) and trickles its body
//     while B creates and deletes marker.
//
// Before: the create landed, and the stored fence went from FB back to FA.
func TestDeletionKeepsItsFence(t *testing.T) {
	needsServers(t)
	t.Run("two replicas", func(t *testing.T) {
		g := NewWithT(t)
		h := newHandover(t, "deltwo")
		slow := s3server.NewDropProxy(store.Endpoint)
		t.Cleanup(slow.Close)
		r1 := startGatewayTo(t, slow.URL, h.routes(), nil)
		r2 := startGateway(t, h.routes(), nil)
		held, release := slow.Hold(func(r *http.Request) bool { return r.Method == http.MethodPut })
		defer release()
		late := make(chan int, 1)
		go func() {
			status, _, _ := raw(g, http.MethodPut, h.url(r1, "marker"), h.a.holderHeaders("If-None-Match", "*"), "stale by A")
			late <- status
		}()
		select {
		case <-held:
		case <-time.After(timeout):
			t.Fatal("A's create did not reach the store")
		}
		h.takeover(g)
		status, _, body := raw(g, http.MethodPut, h.url(r2, "marker"), h.b.holderHeaders(), "by B")
		g.Expect(status).To(Equal(http.StatusOK), body)
		status, _, body = raw(g, http.MethodDelete, h.url(r2, "marker"), h.b.holderHeaders(), "")
		g.Expect(status).To(Equal(http.StatusNoContent), body)
		release()
		g.Expect(<-late).To(Equal(http.StatusServiceUnavailable), "the store refused A's create: not written, retry")
		status, _, body = raw(g, http.MethodPut, h.url(r1, "marker"), h.a.holderHeaders("If-None-Match", "*"), "stale by A")
		g.Expect(status).To(Equal(http.StatusForbidden), body)
		g.Expect(errorOf(g, body).Code).To(Equal("FencedLeaseStaleFence"))
		h.expectTombstone(g, r2, "marker")
	})
	t.Run("one replica, an alias trickled", func(t *testing.T) {
		g := NewWithT(t)
		h := newHandover(t, "delone")
		gw := startGateway(t, h.routes(), nil)
		body := "stale by A"
		up := startTrickle(t, h.url(gw, "./marker"), h.a.holderHeaders("If-None-Match", "*"), len(body), body[:5])
		time.Sleep(300 * time.Millisecond)
		h.takeover(g)
		status, _, resp := raw(g, http.MethodPut, h.url(gw, "marker"), h.b.holderHeaders(), "by B")
		g.Expect(status).To(Equal(http.StatusOK), resp)
		status, _, resp = raw(g, http.MethodDelete, h.url(gw, "marker"), h.b.holderHeaders(), "")
		g.Expect(status).To(Equal(http.StatusNoContent), resp)
		status, resp = up.finish(body[5:])
		g.Expect(status).To(Equal(http.StatusBadRequest), resp)
		g.Expect(errorOf(g, resp).Code).To(Equal("InvalidURI"))
		h.expectTombstone(g, gw, "marker")
	})
}

// TestStalledUpload is finding 6: A, the holder, starts an upload and
// stops mid-body (a paused process) across a takeover.
//
//   - B's writes to the same key are not blocked behind A's upload: B's
//     create and delete return while A is still stalled (the newer
//     grant's write preempts A's upload, whose last byte never left);
//     when A goes on, it is refused and nothing of it is written.
//   - With no newer write to the key, A's upload still cannot complete
//     once the grant has moved: its grant is read again before its last
//     byte, and it is refused.
//
// It prints the age of the grant read behind every committed write (the
// remaining window: at most --grant-max-age, then the store's commit).
// Before: B waited for A, and A's stale write landed after the takeover.
func TestStalledUpload(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	h := newHandover(t, "stalled")
	gw := startGateway(t, h.routes(), nil)
	body := "stale by A"
	same := startTrickle(t, h.url(gw, "marker"), h.a.holderHeaders(), len(body), body[:5])
	other := startTrickle(t, h.url(gw, "other"), h.a.holderHeaders(), len(body), body[:5])
	g.Eventually(func() float64 { return inFlight(gw) }).WithTimeout(timeout).Should(Equal(2.0))
	time.Sleep(300 * time.Millisecond)
	took := h.takeover(g)

	done := make(chan string, 1)
	go func() {
		status, _, resp := raw(g, http.MethodPut, h.url(gw, "marker"), h.b.holderHeaders(), "by B")
		if status == http.StatusOK {
			status, _, resp = raw(g, http.MethodDelete, h.url(gw, "marker"), h.b.holderHeaders(), "")
		}
		done <- fmt.Sprintf("%d %s", status, resp)
	}()
	select {
	case res := <-done:
		g.Expect(res).To(Equal("204 "), "B created and deleted marker")
		t.Logf("B's create and delete returned %s after the takeover was seen, A still stalled", time.Since(took).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		same.finish(body[5:])
		other.finish(body[5:])
		t.Fatal("B's writes are blocked behind A's stalled upload")
	}
	status, resp := same.finish(body[5:])
	g.Expect(status).To(Equal(http.StatusForbidden), resp)
	e := errorOf(g, resp)
	g.Expect(e.Code).To(Equal("FencedLeaseStaleFence"))
	g.Expect(e.Message).To(Equal(fmt.Sprintf("write to %s/marker with fence %d denied: a write with fence %d, a newer grant of FencedLease %s/exporter, arrived while it was in flight (nothing was written)",
		h.bucket, h.a.fence, h.b.fence, h.ns)))
	h.expectTombstone(g, gw, "marker")

	status, resp = other.finish(body[5:])
	g.Expect(status).To(Equal(http.StatusForbidden), resp)
	e = errorOf(g, resp)
	g.Expect(e.Code).To(Equal("FencedLeaseStaleFence"))
	g.Expect(e.Message).To(HaveSuffix("(checked again before the write's last byte: nothing was written)"))
	content, _ := storedObject(context.Background(), h.bucket, "other")
	g.Expect(content).To(Equal("<absent>"))
	g.Expect(counter(g, gw, "put", "denied", "superseded")).To(Equal(1.0))
	g.Expect(counter(g, gw, "put", "denied", "stale_fence")).To(Equal(1.0))
	t.Logf("grant age at the last byte of the %s", grantAges(g, gw))
}

// TestAbandonedWritesFreeTheirSlots (finding 6): writes waiting for a key
// whose upload is stalled end as soon as their clients give up, and free
// their in-flight slots: the gateway keeps serving other requests. Before:
// they waited on a lock that ignored cancellation, and reads got 503.
func TestAbandonedWritesFreeTheirSlots(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	h := newHandover(t, "abandoned")
	gw := startGatewayWith(t, store.Endpoint, h.routes(), func(o *gateway.Options) { o.MaxInFlight = 3 })
	body := "by A, again"
	stalled := startTrickle(t, h.url(gw, "k"), h.a.holderHeaders(), len(body), body[:3])
	// The stalled upload holds the key before the others come: the only
	// request, it has taken the key's lock once the key is in flight. (A
	// write that came first would write its whole body, and the stalled
	// one, judged after it, would find the key changed by the time its
	// last byte goes.)
	g.Eventually(func() float64 { return inFlight(gw) }).WithTimeout(timeout).Should(Equal(1.0))
	g.Eventually(gw.gateway.KeysInFlight).WithTimeout(timeout).Should(Equal(1))
	var waiting []*trickle
	for range 2 {
		waiting = append(waiting, startTrickle(t, h.url(gw, "k"), h.a.holderHeaders(), len(body), body))
	}
	g.Eventually(func() float64 { return inFlight(gw) }).WithTimeout(timeout).Should(Equal(3.0))
	status, _, _ := raw(g, http.MethodGet, h.url(gw, "unrelated"), as(h.a.sTok, ""), "")
	g.Expect(status).To(Equal(http.StatusServiceUnavailable), "every slot is taken")

	for _, w := range waiting {
		w.abandon()
	}
	g.Eventually(func() float64 { return inFlight(gw) }).WithTimeout(timeout).Should(Equal(1.0), "the abandoned writes ended")
	status, _, resp := raw(g, http.MethodGet, h.url(gw, "unrelated"), as(h.a.sTok, ""), "")
	g.Expect(status).To(Equal(http.StatusNotFound), resp)
	status, resp = stalled.finish(body[3:])
	g.Expect(status).To(Equal(http.StatusOK), resp)
}

// setNotReady makes the tenant's holder pod's containers not ready.
func setNotReady(tn *tenant) error {
	return testenv.SetContainersNotReady(context.Background(), env.Client, tn.holder)
}

func inFlight(gw *testGateway) float64 {
	return harness.Value(gw.registry, "fencedlease_gateway_requests_in_flight", nil)
}

// grantAges describes the histogram of the grant's age at commit.
func grantAges(g Gomega, gw *testGateway) string {
	families, err := harness.Gather(gw.registry)
	g.Expect(err).NotTo(HaveOccurred())
	f := families["fencedlease_gateway_grant_age_at_commit_seconds"]
	if f == nil || len(f.GetMetric()) == 0 {
		return "no committed write"
	}
	hist := f.GetMetric()[0].GetHistogram()
	return fmt.Sprintf("%d committed writes: mean %s, all under %s; %v rechecked",
		hist.GetSampleCount(), time.Duration(hist.GetSampleSum()/float64(max(hist.GetSampleCount(), 1))*float64(time.Second)).Round(time.Microsecond),
		upperBound(hist), harness.Value(gw.registry, "fencedlease_gateway_grant_rechecks_total", nil))
}

// upperBound is the smallest bucket bound that holds every observation.
func upperBound(h *dto.Histogram) time.Duration {
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() == h.GetSampleCount() {
			return time.Duration(b.GetUpperBound() * float64(time.Second))
		}
	}
	return 0
}
