package storage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/harness"
)

// TestRandomTokensCostTheHolderNothing is finding 8: a client sending
// random bearer tokens as fast as it can, from one address, while the
// holder writes. The gateway reviews the unknown tokens only within the
// address's budget (the rest are answered 503 SlowDown without a
// TokenReview), and the holder's remembered answer is never evicted: its
// writes go on without a review of their own. Before: every random token
// cost a TokenReview, and enough of them evicted the holder's answer.
func TestRandomTokensCostTheHolderNothing(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ns := namespace(t, "tokens")
	g.Expect(store.CreateBucket(context.Background(), ns)).To(Succeed())
	tn := newTenant(t, ns, "exporter", nil)
	gw := startGatewayWith(t, store.Endpoint, []gateway.Route{{Bucket: ns, Namespace: ns, FencedLease: "exporter"}}, func(o *gateway.Options) {
		r := o.Reviewer.(*gateway.TokenReviewer)
		r.MaxAccepted, r.MaxRejected = 8, 8
		r.UnknownPerSecond, r.UnknownBurst = 20, 40
	})
	url := gw.URL + "/" + ns + "/report"
	status, _, body := raw(g, http.MethodPut, url, tn.holderHeaders(), "first")
	g.Expect(status).To(Equal(http.StatusOK), body)
	g.Expect(reviews(gw, "accepted")).To(Equal(1.0))

	start := time.Now()
	// The flood stops between requests, never during one, so that every
	// request the gateway answered is counted here as well.
	var stopped atomic.Bool
	var sent, slowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !stopped.Load() {
				b := make([]byte, 24)
				_, _ = rand.Read(b)
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
				req.Header.Set(gateway.HeaderToken, hex.EncodeToString(b))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				_ = resp.Body.Close()
				sent.Add(1)
				if resp.StatusCode == http.StatusServiceUnavailable {
					slowed.Add(1)
				}
			}
		})
	}
	var holderFailures []string
	for i := range 20 {
		status, _, body := raw(g, http.MethodPut, url, tn.holderHeaders(), "write "+string(rune('a'+i)))
		if status != http.StatusOK {
			holderFailures = append(holderFailures, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopped.Store(true)
	wg.Wait()
	elapsed := time.Since(start)

	rejected := reviews(gw, "rejected")
	t.Logf("%d random tokens in %s: %v reviewed, %d answered SlowDown; the holder's 20 writes sent %v reviews",
		sent.Load(), elapsed.Round(time.Millisecond), rejected, slowed.Load(), reviews(gw, "accepted")-1)
	g.Expect(holderFailures).To(BeEmpty(), "the holder's writes all went through")
	g.Expect(reviews(gw, "accepted")).To(Equal(1.0), "the holder's answer stayed remembered")
	g.Expect(rejected).To(BeNumerically("<=", 40+20*elapsed.Seconds()+1), "unknown tokens are reviewed within the address's budget")
	g.Expect(float64(sent.Load())).To(BeNumerically(">", rejected), "the flood went over the budget")
	g.Expect(counter(g, gw, "read", "error", "too_many_tokens")).To(Equal(float64(slowed.Load())))
}

func reviews(gw *testGateway, outcome string) float64 {
	return harness.Value(gw.registry, "fencedlease_gateway_token_reviews_total", map[string]string{"outcome": outcome})
}
