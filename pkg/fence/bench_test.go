package fence_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// BenchmarkDetectLoss measures how long a Watcher takes to cancel the holder
// context after the kubelet swaps the files from holder to standby. Each
// iteration is one grant and one loss. The µs/detect metric counts from the
// "..data" swap to the cancellation; ns/op also includes writing the files.
func BenchmarkDetectLoss(b *testing.B) {
	benches := []struct {
		name string
		poll time.Duration // 0: events only
	}{
		{name: "events"},
		{name: "polling-10ms", poll: 10 * time.Millisecond},
		{name: "polling-100ms", poll: 100 * time.Millisecond},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			k := newKubelet(b)
			if err := k.Standby("db"); err != nil {
				b.Fatal(err)
			}
			opts := []fence.Option{fence.WithPollInterval(time.Hour)}
			if bb.poll > 0 {
				opts = []fence.Option{fence.WithoutEvents(), fence.WithPollInterval(bb.poll)}
			}
			w := newWatcher(b, k.Dir(), opts...)
			var total time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				if err := k.Holder(int64(i+1), "db"); err != nil {
					b.Fatal(err)
				}
				hctx, _, err := w.HolderContext(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				if bb.poll > 0 {
					// Break the phase lock between iterations and ticks,
					// so that the loss lands anywhere in a poll interval.
					time.Sleep(rand.N(bb.poll))
				}
				var start time.Time
				k.OnSwap = func() { start = time.Now() }
				b.StartTimer()
				if err := k.Standby("db"); err != nil {
					b.Fatal(err)
				}
				<-hctx.Done()
				total += time.Since(start)
				k.OnSwap = nil
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/detect")
		})
	}
}
