package fencedlease

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/record"
)

func beatLease(rv string, beats int) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "op", Name: "hb", ResourceVersion: rv,
		Annotations: map[string]string{record.HeartbeatBeats: strconv.Itoa(beats)}}}
}

// creditAfterEnd: the last renewal seen counts unless a renewal this
// process missed may have been written before the end, when the time of
// the read does.
func TestCreditAfterEndCountsRenewalsBeforeTheEnd(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		live      *coordinationv1.Lease
		ended     string
		wantFresh bool
	}{
		{name: "none missed", live: beatLease("100", 7), ended: "105"},
		{name: "one missed, written after the end", live: beatLease("110", 8), ended: "105"},
		{name: "one missed, written before the end", live: beatLease("103", 8), ended: "105", wantFresh: true},
		{name: "two missed: one may be before the end", live: beatLease("110", 9), ended: "105", wantFresh: true},
		{name: "a heartbeat started anew", live: beatLease("110", 1), ended: "105", wantFresh: true},
		{name: "versions that do not compare", live: beatLease("x", 8), ended: "105", wantFresh: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			r := &Reconciler{APIReader: fixedReader{l: tc.live}, Clock: clk, Heartbeat: &Heartbeat{Namespace: "op", Name: "hb"}}
			r.once.Do(r.defaults)
			r.mem.sawBeat(beatLease("100", 7)) // seen at t0
			clk.SetTime(t0.Add(3 * time.Second))
			credit, err := r.creditAfterEnd(t.Context(), tc.ended)
			if err != nil {
				t.Fatal(err)
			}
			want := t0
			if tc.wantFresh {
				want = t0.Add(3 * time.Second)
			}
			if !credit.Equal(want) {
				t.Fatalf("credit %s, want %s", credit.Sub(t0), want.Sub(t0))
			}
		})
	}
}

// fixedReader serves one heartbeat, as the API server has it.
type fixedReader struct{ l *coordinationv1.Lease }

func (f fixedReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	f.l.DeepCopyInto(obj.(*coordinationv1.Lease))
	return nil
}

func (f fixedReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }
