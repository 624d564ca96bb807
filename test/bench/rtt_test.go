//go:build bench

package bench_test

import (
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// withRTT is the operator's client configuration with every request held
// back by rtt before it is sent (BENCH_API_RTT): the round trip to an API
// server across a network and etcd's disk, which the test's API server on
// the same machine does not have. It tells how many requests a takeover
// makes in a row, not how fast this machine is.
func withRTT(cfg *rest.Config, rtt time.Duration) *rest.Config {
	if rtt <= 0 {
		return cfg
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return delayed{rt: rt, rtt: rtt} })
	return cfg
}

type delayed struct {
	rt  http.RoundTripper
	rtt time.Duration
}

func (d delayed) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-time.After(d.rtt):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return d.rt.RoundTrip(req)
}
