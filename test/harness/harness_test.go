package harness

import (
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSyncBufferKeepsConcurrentWritesUpToMax(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if n, err := b.Write([]byte("ab")); n != 2 || err != nil {
					t.Errorf("Write = %d, %v", n, err)
				}
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 1600 {
		t.Errorf("kept %d bytes, want 1600", got)
	}
	capped := SyncBuffer{Max: 5}
	for _, s := range []string{"abc", "def", "ghi"} {
		if n, _ := capped.Write([]byte(s)); n != 3 {
			t.Errorf("Write(%q) = %d, want 3 (dropped bytes count as written)", s, n)
		}
	}
	if got := capped.String(); got != "abcde" {
		t.Errorf("kept %q, want %q", got, "abcde")
	}
}

func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p == 0 {
			t.Fatalf("ports %v: want three distinct ports", ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		_ = l.Close()
		if low := ephemeralLow(); low > lowestPort+1000 && (p < lowestPort || p >= low) {
			t.Errorf("port %d outside [%d, %d): a client's outgoing connection may take it", p, lowestPort, low)
		}
	}
}

func TestValueSumsTheMatchingSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total", Help: "h"}, []string{"result", "reason"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "took_seconds", Help: "h"}, []string{"result"})
	reg.MustRegister(c, h)
	c.WithLabelValues("denied", "stale").Add(2)
	c.WithLabelValues("denied", "unknown").Add(3)
	c.WithLabelValues("allowed", "holder").Add(5)
	h.WithLabelValues("denied").Observe(0.5)
	h.WithLabelValues("denied").Observe(1.5)
	h.WithLabelValues("allowed").Observe(4)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"requests_total", nil, 10},
		{"requests_total", map[string]string{"result": "denied"}, 5},
		{"requests_total", map[string]string{"result": "denied", "reason": "stale"}, 2},
		{"requests_total", map[string]string{"result": "error"}, 0},
		{"requests_total", map[string]string{"other": ""}, 0},
		{"took_seconds", map[string]string{"result": "denied"}, 2},
		{"absent", nil, 0},
	} {
		if got := Value(reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("Value(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	families, err := Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := HistogramSum(families, "took_seconds", map[string]string{"result": "denied"}); got != 2 {
		t.Errorf("HistogramSum = %v, want 2", got)
	}
	if _, ok := Sample(families, "requests_total", map[string]string{"result": "error"}); ok {
		t.Error("Sample found a series that does not exist")
	}
}

func TestLineLogCountsALineOnceItsNewlineArrives(t *testing.T) {
	var l LineLog
	_, _ = l.Write([]byte("first li"))
	if n := len(l.Lines()); n != 0 {
		t.Fatalf("a line without its newline counted: %d lines", n)
	}
	_, _ = l.Write([]byte("ne\nsecond\nthi"))
	lines := l.Lines()
	if len(lines) != 2 || lines[0].Text != "first line" || lines[1].Text != "second" {
		t.Fatalf("lines = %+v, want [first line, second]", lines)
	}
	if !l.Contains("cond") || l.Contains("third") {
		t.Fatalf("Contains: want a complete line found and a partial one not")
	}
}
