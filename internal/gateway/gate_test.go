package gateway

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestTailReader: the last byte goes only once the body ended where it
// should and the gate let it go; otherwise the reader fails before it, and
// keeps why.
func TestTailReader(t *testing.T) {
	ctx := context.Background()
	fresh := func() *gate { return &gate{grantAt: time.Now(), maxAge: time.Hour} }
	tests := []struct {
		name, body string
		n          int64
		gate       *gate
		sent       string
		err        string
	}{
		{name: "exact", body: "hello", n: 5, gate: fresh(), sent: "hello"},
		{name: "empty", body: "", n: 0, gate: fresh(), sent: ""},
		{name: "shorter", body: "hell", n: 5, gate: fresh(), sent: "hell", err: "the body ended after 4 bytes, 5 were announced"},
		{name: "longer", body: "hello!", n: 5, gate: fresh(), sent: "hell", err: "the body holds more than the 5 bytes announced"},
		{name: "grant read again and gone", body: "hello", n: 5, gate: &gate{grantAt: time.Now().Add(-time.Second), maxAge: time.Millisecond,
			recheck: func(context.Context) (time.Time, *Decision, error) {
				return time.Now(), &Decision{Message: "stale fence"}, nil
			}}, sent: "hell", err: "stale fence (checked again before the write's last byte: nothing was written)"},
		{name: "grant read again and held", body: "hello", n: 5, gate: &gate{grantAt: time.Now().Add(-time.Second), maxAge: time.Minute,
			recheck: func(context.Context) (time.Time, *Decision, error) { return time.Now(), nil, nil }}, sent: "hello"},
		{name: "API server down", body: "hello", n: 5, gate: &gate{grantAt: time.Now().Add(-time.Second), maxAge: time.Millisecond,
			recheck: func(context.Context) (time.Time, *Decision, error) { return time.Now(), nil, errors.New("refused") }},
			sent: "hell", err: "cannot read the grant again before the write's last byte (nothing was written): refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tr := &tailReader{ctx: ctx, src: strings.NewReader(tc.body), n: tc.n, gate: tc.gate, broken: clientBroken}
			var got strings.Builder
			_, err := io.Copy(&got, tr)
			g.Expect(got.String()).To(Equal(tc.sent))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(tc.gate.committed()).To(BeTrue())
				return
			}
			g.Expect(err).To(MatchError(tc.err))
			g.Expect(tr.err).To(MatchError(tc.err))
			g.Expect(tc.gate.committed()).To(BeFalse())
		})
	}

	// A preempted write stops before its last byte; a committed one cannot
	// be preempted any more.
	g := NewWithT(t)
	gt := fresh()
	gt.wr, gt.fence = Write{Bucket: "b", Key: "k"}, 41
	tr := &tailReader{ctx: ctx, src: strings.NewReader("hello"), n: 5, gate: gt, broken: clientBroken}
	buf := make([]byte, 2)
	_, err := tr.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	gt.preempt(42)
	_, err = io.Copy(io.Discard, tr)
	g.Expect(err).To(MatchError(ContainSubstring("a write with fence 42")))
	gt = fresh()
	g.Expect(gt.commit(ctx)).To(Succeed())
	gt.preempt(42)
	g.Expect(gt.committed()).To(BeTrue())
}
