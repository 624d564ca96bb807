//go:build bench

package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// CASProbe is what a takeover is made of, measured on a Lease of its own in
// the same run as the handoffs: the compare-and-swap round trip (a Lease
// PUT at the resourceVersion last written) and the watch delivery after it
// (from the PUT's reply to its event reaching a watcher; 0 when the event
// came first).
type CASProbe struct {
	CAS      []float64 `json:"cas_ms"`
	Delivery []float64 `json:"delivery_ms"`
}

// probeCAS writes the Lease cas-probe in ns every interval, each write a
// compare-and-swap on the one before, until the returned function is
// called, which returns what it measured. A write that fails is an error of
// the test: the probe is alone on its Lease.
func probeCAS(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, interval time.Duration) func() CASProbe {
	leases := cs.CoordinationV1().Leases(ns)
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cas-probe"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the probe's Lease: %v", err)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", l.Name).String(),
		ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatalf("watch the probe's Lease: %v", err)
	}
	var mu sync.Mutex
	arrived, replied := map[string]time.Time{}, map[string]time.Time{}
	var cas []float64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			at := time.Now()
			if got, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Modified {
				mu.Lock()
				arrived[got.ResourceVersion] = at
				mu.Unlock()
			}
		}
	}()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			start := time.Now()
			next, err := leases.Update(ctx, l, metav1.UpdateOptions{})
			if err != nil {
				t.Errorf("the probe's compare-and-swap at %s: %v", l.ResourceVersion, err)
				return
			}
			mu.Lock()
			replied[next.ResourceVersion] = time.Now()
			cas = append(cas, ms(time.Since(start)))
			mu.Unlock()
			l = next
		}
	}()
	return func() CASProbe {
		close(stop)
		<-stopped
		time.Sleep(time.Second) // the last events
		w.Stop()
		<-watched
		mu.Lock()
		defer mu.Unlock()
		p := CASProbe{CAS: cas}
		for rv, at := range replied {
			if got, ok := arrived[rv]; ok {
				p.Delivery = append(p.Delivery, max(ms(got.Sub(at)), 0))
			}
		}
		t.Logf("Lease compare-and-swap: %s; watch delivery after it: %s", quantiles(p.CAS), quantiles(p.Delivery))
		if len(p.Delivery) < len(p.CAS)*9/10 {
			t.Errorf("%s", fmt.Sprintf("the probe's watch saw %d of its %d writes", len(p.Delivery), len(p.CAS)))
		}
		return p
	}
}
