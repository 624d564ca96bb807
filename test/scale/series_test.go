//go:build scale

package scale_test

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// sample is what the operator and the API server did over one interval of
// the cold start: the API server's writes by verb and resource, the
// operator's reconciles by result, and its work queue and pace at the end
// of the interval. A cold start that slows down part way shows where in
// these series.
type sample struct {
	Seconds    float64            `json:"s"`
	Writes     map[string]float64 `json:"writes"`
	Reconciles map[string]float64 `json:"reconciles"`
	Queue      float64            `json:"queue_depth"`
	Share      float64            `json:"renewal_share"`
	Stretch    float64            `json:"stretch"`
	Rate       float64            `json:"first_grant_rate"`
	Closed     float64            `json:"admission_closed"`
	// CPU is the seconds of CPU the operator, kube-apiserver and etcd used
	// in the interval: what each write and each grant cost them.
	CPU struct {
		Operator  float64 `json:"operator"`
		APIServer float64 `json:"apiserver"`
		Etcd      float64 `json:"etcd"`
	} `json:"cpu_s"`
}

// sumOf sums the series of metrics whose name and labels start with prefix
// and contain label.
func sumOf(m map[string]float64, prefix, label string) float64 {
	total := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && strings.Contains(k, label) {
			total += v
		}
	}
	return total
}

// series samples the cold start every interval from start until stop is
// called, which returns the samples.
func series(ctx context.Context, cfg *rest.Config, op *operator, start time.Time, interval time.Duration) (stop func() []sample) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu  sync.Mutex
		out []sample
		wg  sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		w0, _ := readAPIRequests(ctx, cfg, writeVerbs)
		m0 := scrapeOr(op)
		cpu := func() [3]time.Duration {
			return [3]time.Duration{op.cpu(), cpuOf(plane.apiserver), cpuOf(plane.etcd)}
		}
		c0 := cpu()
		take := func() {
			// The last sample is taken after stop, on a context of its own.
			w1, err := readAPIRequests(context.WithoutCancel(ctx), cfg, writeVerbs)
			if err != nil {
				return
			}
			m1 := scrapeOr(op)
			s := sample{Seconds: time.Since(start).Seconds(), Writes: map[string]float64{}, Reconciles: reconcilesBetween(m0, m1),
				Queue: sumOf(m1, `workqueue_depth{`, `name="fencedlease"`), Share: m1["fencedlease_renewal_worker_share"],
				Stretch: m1["fencedlease_renewal_stretch"], Rate: m1["fencedlease_first_grant_rate"], Closed: m1["fencedlease_operator_saturated"]}
			for k, v := range w1 {
				if d := v - w0[k]; d > 0 {
					s.Writes[k] = d
				}
			}
			c1 := cpu()
			s.CPU.Operator, s.CPU.APIServer, s.CPU.Etcd = (c1[0] - c0[0]).Seconds(), (c1[1] - c0[1]).Seconds(), (c1[2] - c0[2]).Seconds()
			c0 = c1
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
			w0, m0 = w1, m1
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				take()
				return
			case <-tick.C:
				take()
			}
		}
	}()
	return func() []sample {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// reconcilesBetween is the operator's reconciles of FencedLeases between two
// scrapes, by result (controller_runtime_reconcile_total).
func reconcilesBetween(before, after map[string]float64) map[string]float64 {
	const name = `controller_runtime_reconcile_total{`
	out := map[string]float64{}
	for k, v := range after {
		if !strings.HasPrefix(k, name) || !strings.Contains(k, `controller="fencedlease"`) {
			continue
		}
		i := strings.Index(k, `result="`)
		if i < 0 {
			continue
		}
		result := k[i+8 : i+8+strings.IndexByte(k[i+8:], '"')]
		if d := v - before[k]; d > 0 {
			out[result] += d
		}
	}
	return out
}
