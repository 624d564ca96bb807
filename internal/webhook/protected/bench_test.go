package protected_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// BenchmarkAdmissionLatency measures what the fencing webhook adds to a
// write: the holder pod updates a protected ConfigMap (the API server calls
// the webhook over TLS, which decides from its cache) and an unprotected one
// (no webhook call), alternately, through the real API server. It reports
// the p50 and p99 of each, the differences of the quantiles, and the mean
// time the webhook's handler itself takes.
func BenchmarkAdmissionLatency(b *testing.B) {
	f := newFixture(b)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	n := f.waitHolder("db", "a", 0)
	asA := f.asPod(a)
	f.g.Expect(asA.Create(f.ctx, f.configMap("state", "db", fenceOf(n), "0"))).To(Succeed())
	plain := &corev1.ConfigMap{Data: map[string]string{"value": "0"}}
	plain.Namespace, plain.Name = f.ns, "plain"
	f.g.Expect(asA.Create(f.ctx, plain)).To(Succeed())

	patch := func(name string, i int) time.Duration {
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = f.ns, name
		p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"value":"%d"}}`, i))
		start := time.Now()
		if err := asA.Patch(f.ctx, cm, p); err != nil {
			b.Fatalf("patch %s: %v", name, err)
		}
		return time.Since(start)
	}
	reportLatency(b, patch)
}

// BenchmarkAdmissionLatencyCustomResource is BenchmarkAdmissionLatency for
// a custom resource (a Widget, which the test configuration lists): a
// protected one against an unprotected one.
func BenchmarkAdmissionLatencyCustomResource(b *testing.B) {
	f := newFixture(b)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	a := f.readyPod("a", time.Hour)
	n := f.waitHolder("db", "a", 0)
	asA := f.asPod(a)
	f.g.Expect(asA.Create(f.ctx, f.widget("state", "db", fenceOf(n), 0))).To(Succeed())
	plain := f.widget("plain", "db", "", 0)
	plain.SetLabels(nil)
	f.g.Expect(asA.Create(f.ctx, plain)).To(Succeed())
	patch := func(name string, i int) time.Duration {
		w := f.widget(name, "db", "", 0)
		p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"size":%d}}`, i))
		start := time.Now()
		if err := asA.Patch(f.ctx, w, p); err != nil {
			b.Fatalf("patch %s: %v", name, err)
		}
		return time.Since(start)
	}
	reportLatency(b, patch)
}

// reportLatency patches the protected object "state" and the unprotected
// "plain" in turn, and reports the quantiles of each and the differences.
func reportLatency(b *testing.B, patch func(name string, i int) time.Duration) {
	for i := range 20 { // warm up connections and caches
		patch("state", i)
		patch("plain", i)
	}
	n0, sum0 := handlerTime()
	protectedTimes := make([]time.Duration, 0, b.N)
	plainTimes := make([]time.Duration, 0, b.N)
	for i := 0; b.Loop(); i++ {
		protectedTimes = append(protectedTimes, patch("state", i))
		plainTimes = append(plainTimes, patch("plain", i))
	}
	n1, sum1 := handlerTime()
	if n1 > n0 {
		b.ReportMetric((sum1-sum0)/float64(n1-n0)*1e6, "handler-mean-µs")
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50p, p99p := quantile(protectedTimes, 0.50), quantile(protectedTimes, 0.99)
	p50u, p99u := quantile(plainTimes, 0.50), quantile(plainTimes, 0.99)
	b.ReportMetric(ms(p50p), "p50-protected-ms")
	b.ReportMetric(ms(p99p), "p99-protected-ms")
	b.ReportMetric(ms(p50u), "p50-unprotected-ms")
	b.ReportMetric(ms(p99u), "p99-unprotected-ms")
	b.ReportMetric(ms(p50p-p50u), "p50-added-ms")
	b.ReportMetric(ms(p99p-p99u), "p99-added-ms")
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
