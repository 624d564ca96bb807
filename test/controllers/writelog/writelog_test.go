package writelog

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// line is a Write line as the example controller logs it (zap JSON, the
// Widget as a klog object reference).
const line = `{"level":"info","ts":"2026-12-02T15:00:00.5Z","logger":"late","msg":"Write","widget":{"name":"w1","namespace":"demo-x"},` +
	`"part":"status","verb":"patch","result":"rejected","fence":251,"late":true,"sent":"2026-12-02T15:00:00.4Z","done":"2026-12-02T15:00:00.45Z",` +
	`"error":"admission webhook \"protected.fencedlease.io\" denied the request: stale holder"}`

func TestRead(t *testing.T) {
	g := NewWithT(t)
	ws, err := Read(strings.NewReader("not json\n" + line + "\n" + `{"msg":"Writing on as if this replica still led"}` + "\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ws).To(HaveLen(1))
	w := ws[0]
	g.Expect(w.Widget.Name).To(Equal("w1"))
	g.Expect(w.Widget.Namespace).To(Equal("demo-x"))
	g.Expect([]any{w.Part, w.Verb, w.Result, w.Fence, w.Late}).To(Equal([]any{"status", "patch", Rejected, int64(251), true}))
	g.Expect(w.Sent).To(Equal(time.Date(2026, 12, 2, 15, 0, 0, 400_000_000, time.UTC)))
	g.Expect(w.Error).To(ContainSubstring("stale holder"))
	_, ok := Parse(`{"msg":"Write"`)
	g.Expect(ok).To(BeFalse(), "a cut line")
}

// TestJudge: writes answered before the resume are not counted; one sent
// before the pause and answered after is in flight; after the resume, the
// late writes and the controller's own are counted apart.
func TestJudge(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	paused, resumed := at(10), at(20)
	ws := []Write{
		{Result: Accepted, Sent: at(1), Done: at(1.1)},
		{Result: Accepted, Sent: at(9.9), Done: at(20.1)},
		{Result: Refused, Sent: at(20.2), Done: at(20.2)},
		{Result: Rejected, Sent: at(20.3), Done: at(21.5)},
		{Result: Rejected, Late: true, Sent: at(21), Done: at(21.1)},
		{Result: Rejected, Late: true, Sent: at(22), Done: at(22.1)},
		{Result: Accepted, Late: true, Sent: at(23), Done: at(23.1)},
	}
	run := Judge(ws, paused, resumed)
	g.Expect(run.Paused).To(Equal(10 * time.Second))
	g.Expect(run.InFlight).To(Equal(Tally{Accepted: 1}))
	g.Expect(run.Own).To(Equal(Tally{Refused: 1, Rejected: 1}))
	g.Expect(run.OwnFor).To(Equal(1500 * time.Millisecond))
	g.Expect(run.Late).To(Equal(Tally{Rejected: 2, Accepted: 1}))
	g.Expect(Count(ws)).To(Equal(Tally{Accepted: 3, Refused: 1, Rejected: 3}))
	g.Expect(SentAfter(ws, at(22))).To(HaveLen(1))
}
