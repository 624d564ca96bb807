package fencesql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence/fencesql"
)

const staleMsg = "stale fence: no row matched (a newer holder has written it, or it does not exist)"

// TestStaleHolder is the seeds' scenario: A gets fence 41 and pauses; B gets
// 42 and commits; A resumes and writes with 41. A's write changes nothing
// and reports ErrStale; the row keeps B's data and fence.
func TestStaleHolder(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			g.Expect(fencesql.Exec(t.Context(), b.exec, 41, tg.write("A-1"))).To(Succeed())
			// A pauses; B is granted 42 and commits.
			g.Expect(fencesql.Exec(t.Context(), b.exec, 42, tg.write("B-1"))).To(Succeed())
			g.Expect(tg.row(t)).To(Equal(row{Version: "B-1", Fence: 42}))

			// A resumes with its old token.
			err := fencesql.Exec(t.Context(), b.exec, 41, tg.write("A-2"))
			g.Expect(err).To(MatchError(fmt.Sprintf("update %s with fence 41: %s", tg.table, staleMsg)))
			g.Expect(errors.Is(err, fencesql.ErrStale)).To(BeTrue())
			g.Expect(tg.row(t)).To(Equal(row{Version: "B-1", Fence: 42}))

			// The same through Apply: rolled back, op ID not recorded.
			op := opID(t, "A-3")
			err = fencesql.Apply(t.Context(), b.db, op, 41, tg.write("A-3"))
			g.Expect(err).To(MatchError(fmt.Sprintf(`operation "%s": update %s with fence 41: %s`, op, tg.table, staleMsg)))
			g.Expect(errors.Is(err, fencesql.ErrStale)).To(BeTrue())
			g.Expect(tg.row(t)).To(Equal(row{Version: "B-1", Fence: 42}))
			g.Expect(recordedFence(t, b, op)).To(BeZero())
		})
	}
}

// TestSameHolderWritesAgain checks the <= comparison: the holder may write
// the same row repeatedly with its token.
func TestSameHolderWritesAgain(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			g.Expect(fencesql.Exec(t.Context(), b.exec, 42, tg.write("B-1"))).To(Succeed())
			g.Expect(fencesql.Exec(t.Context(), b.exec, 42, tg.write("B-2"))).To(Succeed())
			g.Expect(tg.row(t)).To(Equal(row{Version: "B-2", Fence: 42}))
			g.Expect(fencesql.Apply(t.Context(), b.db, opID(t, "1"), 42, tg.write("B-3"))).To(Succeed())
			g.Expect(fencesql.Apply(t.Context(), b.db, opID(t, "2"), 42, tg.write("B-4"))).To(Succeed())
			g.Expect(tg.row(t)).To(Equal(row{Version: "B-4", Fence: 42}))
		})
	}
}

// TestRetriedOperationAppliedOnce replays an operation after another one
// changed the row: the replay reports ErrAlreadyApplied and does not undo
// the later change.
func TestRetriedOperationAppliedOnce(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			op1, op2 := opID(t, "1"), opID(t, "2")
			g.Expect(fencesql.Apply(t.Context(), b.db, op1, 42, tg.write("op1"))).To(Succeed())
			g.Expect(recordedFence(t, b, op1)).To(Equal(int64(42)))
			g.Expect(fencesql.Apply(t.Context(), b.db, op2, 42, tg.write("op2"))).To(Succeed())

			err := fencesql.Apply(t.Context(), b.db, op1, 42, tg.write("op1"))
			g.Expect(err).To(MatchError(fmt.Sprintf(`operation "%s": operation already applied`, op1)))
			g.Expect(errors.Is(err, fencesql.ErrAlreadyApplied)).To(BeTrue())
			g.Expect(tg.row(t)).To(Equal(row{Version: "op2", Fence: 42}))

			// A replay is recognised even when its fence is now stale.
			err = fencesql.Apply(t.Context(), b.db, op1, 41, tg.write("op1"))
			g.Expect(errors.Is(err, fencesql.ErrAlreadyApplied)).To(BeTrue())
			g.Expect(tg.row(t)).To(Equal(row{Version: "op2", Fence: 42}))
			g.Expect(recordedFence(t, b, op1)).To(Equal(int64(42)))
		})
	}
}

// TestStaleAttemptNotRecorded: the stale attempt's ID stays free, so the
// current holder can still apply that operation.
func TestStaleAttemptNotRecorded(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			op := opID(t, "handover")
			g.Expect(fencesql.Exec(t.Context(), b.exec, 42, tg.write("B-1"))).To(Succeed())

			err := fencesql.Apply(t.Context(), b.db, op, 41, tg.write("A"))
			g.Expect(errors.Is(err, fencesql.ErrStale)).To(BeTrue(), "err: %v", err)
			g.Expect(recordedFence(t, b, op)).To(BeZero())

			g.Expect(fencesql.Apply(t.Context(), b.db, op, 42, tg.write("B-2"))).To(Succeed())
			g.Expect(tg.row(t)).To(Equal(row{Version: "B-2", Fence: 42}))
			g.Expect(recordedFence(t, b, op)).To(Equal(int64(42)))
		})
	}
}

// TestMissingRow: zero rows because the row does not exist is ErrStale too,
// never success.
func TestMissingRow(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			u := tg.write("x")
			u.Where = []fencesql.Column{{Name: "id", Value: "no-such-row"}}
			err := fencesql.Exec(t.Context(), b.exec, 42, u)
			g.Expect(errors.Is(err, fencesql.ErrStale)).To(BeTrue(), "err: %v", err)
		})
	}
}

// TestApplyFuncRollsBack: an error from the function undoes the recorded
// ID and the writes before it.
func TestApplyFuncRollsBack(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			op := opID(t, "rollback")
			boom := errors.New("boom")
			err := fencesql.ApplyFunc(t.Context(), b.db, op, 42, func(ctx context.Context, tx fencesql.Execer) error {
				if err := fencesql.Exec(ctx, tx, 42, tg.write("half")); err != nil {
					return err
				}
				return boom
			})
			g.Expect(err).To(MatchError(fmt.Sprintf(`operation "%s": boom`, op)))
			g.Expect(errors.Is(err, boom)).To(BeTrue())
			g.Expect(tg.row(t)).To(Equal(row{Version: "v0", Fence: 0}))
			g.Expect(recordedFence(t, b, op)).To(BeZero())
		})
	}
}

func TestUpdateSQL(t *testing.T) {
	tests := []struct {
		name     string
		u        fencesql.Update
		fence    int64
		wantSQL  string
		wantArgs []any
		wantErr  string
	}{
		{
			name: "default fence column",
			u: fencesql.Update{
				Table: "export_targets",
				Set:   []fencesql.Column{{Name: "object_version", Value: "v2"}, {Name: "updated_at", Value: "now"}},
				Where: []fencesql.Column{{Name: "id", Value: 7}},
			},
			fence:    42,
			wantSQL:  `UPDATE "export_targets" SET "object_version" = $1, "updated_at" = $2, "last_fence" = $3 WHERE "id" = $4 AND "last_fence" <= $3`,
			wantArgs: []any{"v2", "now", int64(42), 7},
		},
		{
			name:     "schema, own fence column, composite key",
			u:        fencesql.Update{Table: "billing.invoices", FenceColumn: "fence", Where: []fencesql.Column{{Name: "tenant", Value: "t"}, {Name: "id", Value: 1}}},
			fence:    9,
			wantSQL:  `UPDATE "billing"."invoices" SET "fence" = $1 WHERE "tenant" = $2 AND "id" = $3 AND "fence" <= $1`,
			wantArgs: []any{int64(9), "t", 1},
		},
		{name: "no table", u: fencesql.Update{Where: []fencesql.Column{{Name: "id", Value: 1}}}, fence: 1, wantErr: "update: table name is empty"},
		{name: "no where", u: fencesql.Update{Table: "t"}, fence: 1, wantErr: "update t: no WHERE column: a fenced update must select its row"},
		{name: "zero fence", u: fencesql.Update{Table: "t", Where: []fencesql.Column{{Name: "id", Value: 1}}}, fence: 0, wantErr: "update t: invalid fence 0: must be positive"},
		{
			name: "sets the fence column", fence: 1,
			u:       fencesql.Update{Table: "t", Set: []fencesql.Column{{Name: "last_fence", Value: 5}}, Where: []fencesql.Column{{Name: "id", Value: 1}}},
			wantErr: `update t: invalid SET column "last_fence"`,
		},
		{name: "quotes identifiers", u: fencesql.Update{Table: `t"; DROP TABLE x; --`, Where: []fencesql.Column{{Name: "id", Value: 1}}}, fence: 1,
			wantSQL: `UPDATE "t""; DROP TABLE x; --" SET "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1`, wantArgs: []any{int64(1), 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			q, args, err := tt.u.SQL(tt.fence)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(q).To(Equal(tt.wantSQL))
			g.Expect(args).To(Equal(tt.wantArgs))
		})
	}
}

func TestRecordOperationInvalid(t *testing.T) {
	g := NewWithT(t)
	b := backends(t)[0]
	g.Expect(fencesql.RecordOperation(t.Context(), b.exec, "", 1)).To(MatchError("operation: empty operation ID"))
	g.Expect(fencesql.RecordOperation(t.Context(), b.exec, "x", -1)).To(MatchError(`operation "x": invalid fence -1: must be positive`))
}

// TestConcurrentRetry: two attempts of one operation race (a retry sent
// while the first attempt's outcome is unknown). Exactly one applies.
func TestConcurrentRetry(t *testing.T) {
	g := NewWithT(t)
	b := backends(t)[0] // database/sql: a pool, so the attempts use two connections
	g.Expect(b.name).To(Equal("database-sql"))
	tg := newTarget(t, b)
	op := opID(t, "race")
	errs := make(chan error, 2)
	for _, v := range []string{"first", "second"} {
		go func() { errs <- fencesql.Apply(t.Context(), b.db, op, 42, tg.write(v)) }()
	}
	var applied, already int
	for range 2 {
		var err error
		g.Eventually(errs).WithTimeout(30 * time.Second).Should(Receive(&err))
		switch {
		case err == nil:
			applied++
		case errors.Is(err, fencesql.ErrAlreadyApplied):
			already++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	g.Expect([]int{applied, already}).To(Equal([]int{1, 1}))
	g.Expect(tg.row(t).Version).To(BeElementOf("first", "second"))
	g.Expect(recordedFence(t, b, op)).To(Equal(int64(42)))
}
