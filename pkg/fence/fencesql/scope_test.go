package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence/fencesql"
)

// newScope returns a shard scope of its own for each (sub)test and run.
func newScope(t *testing.T, key string) string {
	return fencesql.ShardScope("ns", fmt.Sprintf("set-%s-%d", sanitize(t.Name()), runID), key)
}

// scopeFence returns the scope's stored fence, 0 when it has none.
func scopeFence(t *testing.T, b backend, scope string) int64 {
	t.Helper()
	var fence int64
	err := b.queryRow(t.Context(), "SELECT coalesce(max(fence), 0) FROM "+fencesql.FencesTable+" WHERE scope = $1", []any{scope}, &fence)
	if err != nil {
		t.Fatal(err)
	}
	return fence
}

// TestScopedStaleOnUntouchedRow: the new owner of a shard (fence 42) writes
// one row; the old owner (41) is then refused on another row of the shard,
// which the new owner never touched. The same write through Apply, fenced
// by rows only, would land; that is what the scope adds.
func TestScopedStaleOnUntouchedRow(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			touched := newTarget(t, b)
			untouched := target{b: b, table: touched.table, id: "report-weekly"}
			_, err := b.exec.Exec(t.Context(), "INSERT INTO "+touched.table+" (id, object_version) VALUES ($1, 'v0')", untouched.id)
			g.Expect(err).NotTo(HaveOccurred())
			scope, other := newScope(t, "a"), newScope(t, "b")

			g.Expect(fencesql.ApplyScoped(t.Context(), b.db, scope, opID(t, "A-1"), 41, untouched.write("A-1"))).To(Succeed())
			g.Expect(fencesql.ApplyScoped(t.Context(), b.db, scope, opID(t, "B"), 42, touched.write("B"))).To(Succeed())
			g.Expect(scopeFence(t, b, scope)).To(Equal(int64(42)))

			op := opID(t, "A-2")
			err = fencesql.ApplyScoped(t.Context(), b.db, scope, op, 41, untouched.write("A-2"))
			g.Expect(errors.Is(err, fencesql.ErrStale)).To(BeTrue(), "err: %v", err)
			g.Expect(err).To(MatchError(fmt.Sprintf(`operation "%s": fence scope %q with fence 41: a higher fence has written: %v`, op, scope, fencesql.ErrStale)))
			g.Expect(untouched.row(t)).To(Equal(row{Version: "A-1", Fence: 41}))
			g.Expect(recordedFence(t, b, op)).To(BeZero())
			g.Expect(scopeFence(t, b, scope)).To(Equal(int64(42)))

			// The same owner writes again with its fence; another shard's
			// fence is its own.
			g.Expect(fencesql.ApplyScoped(t.Context(), b.db, scope, opID(t, "B-2"), 42, untouched.write("B-2"))).To(Succeed())
			g.Expect(fencesql.ApplyScoped(t.Context(), b.db, other, opID(t, "other"), 7, fencesql.Update{
				Table: touched.table, Set: []fencesql.Column{{Name: "object_version", Value: "other"}},
				Where: []fencesql.Column{{Name: "id", Value: "no-such-row"}},
			})).To(MatchError(ContainSubstring("stale fence")))
			g.Expect(scopeFence(t, b, other)).To(BeZero(), "a rolled-back write leaves no fence")
			g.Expect(fencesql.ApplyScopedFunc(t.Context(), b.db, other, opID(t, "other-2"), 7, func(context.Context, fencesql.Execer) error { return nil })).To(Succeed())
			g.Expect(scopeFence(t, b, other)).To(Equal(int64(7)))
			g.Expect(scopeFence(t, b, scope)).To(Equal(int64(42)))
		})
	}
}

// TestScopedRetriedOperation: a replay reports ErrAlreadyApplied, whatever
// its fence, and changes neither the rows nor the scope's fence.
func TestScopedRetriedOperation(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			scope := newScope(t, "a")
			op := opID(t, "op")
			g.Expect(fencesql.ApplyScoped(t.Context(), b.db, scope, op, 41, tg.write("first"))).To(Succeed())
			g.Expect(fencesql.ApplyScoped(t.Context(), b.db, scope, opID(t, "next"), 42, tg.write("next"))).To(Succeed())
			for _, f := range []int64{41, 42, 43} {
				err := fencesql.ApplyScoped(t.Context(), b.db, scope, op, f, tg.write("replay"))
				g.Expect(errors.Is(err, fencesql.ErrAlreadyApplied)).To(BeTrue(), "fence %d: err: %v", f, err)
			}
			g.Expect(tg.row(t)).To(Equal(row{Version: "next", Fence: 42}))
			g.Expect(scopeFence(t, b, scope)).To(Equal(int64(42)))
		})
	}
}

func TestRaiseFenceInvalid(t *testing.T) {
	g := NewWithT(t)
	b := backends(t)[0]
	g.Expect(fencesql.RaiseFence(t.Context(), b.exec, "", 1)).To(MatchError("fence scope: empty scope name"))
	g.Expect(fencesql.RaiseFence(t.Context(), b.exec, "ns/s/k", 0)).To(MatchError(`fence scope "ns/s/k": invalid fence 0: must be positive`))
	g.Expect(fencesql.ShardScope("billing", "exporters", "eu-1")).To(Equal("billing/exporters/eu-1"))
}

// TestScopedRace: a transaction of the newer grant (42) holds the scope;
// one of the older grant (41), on a row the newer one does not touch, is
// started and waits for it (PostgreSQL shows
// it waiting on a lock); the newer one commits; the older one must fail
// with ErrStale and change nothing. Run on a scope that exists and on one
// that the newer transaction creates.
func TestScopedRace(t *testing.T) {
	b := backends(t)[0] // database/sql: a pool, so the transactions use two connections
	if b.name != "database-sql" {
		t.Fatalf("backend %s, want database-sql", b.name)
	}
	sqlDB, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	for _, exists := range []bool{true, false} {
		t.Run(fmt.Sprintf("exists=%v", exists), func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, b)
			untouched := target{b: b, table: tg.table, id: "report-weekly"}
			_, err := b.exec.Exec(t.Context(), "INSERT INTO "+tg.table+" (id, object_version) VALUES ($1, 'v0')", untouched.id)
			g.Expect(err).NotTo(HaveOccurred())
			scope := newScope(t, "a")
			if exists {
				g.Expect(fencesql.ApplyScoped(t.Context(), b.db, scope, opID(t, "first"), 40, tg.write("first"))).To(Succeed())
			}
			newer, err := sqlDB.BeginTx(t.Context(), nil)
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = newer.Rollback() }()
			g.Expect(fencesql.RaiseFence(t.Context(), fencesql.SQLExec(newer), scope, 42)).To(Succeed())
			g.Expect(fencesql.Exec(t.Context(), fencesql.SQLExec(newer), 42, tg.write("B"))).To(Succeed())

			op := opID(t, "A")
			older := make(chan error, 1)
			go func() { older <- fencesql.ApplyScoped(t.Context(), b.db, scope, op, 41, untouched.write("A")) }()
			g.Eventually(func() (int, error) {
				var n int
				err := sqlDB.QueryRowContext(t.Context(),
					"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO "+fencesql.FencesTable+"%'").Scan(&n)
				return n, err
			}).WithTimeout(30*time.Second).Should(Equal(1), "the older transaction waits for the newer one's scope")
			g.Expect(newer.Commit()).To(Succeed())

			var got error
			g.Eventually(older).WithTimeout(30 * time.Second).Should(Receive(&got))
			g.Expect(errors.Is(got, fencesql.ErrStale)).To(BeTrue(), "err: %v", got)
			g.Expect(tg.row(t)).To(Equal(row{Version: "B", Fence: 42}))
			g.Expect(untouched.row(t)).To(Equal(row{Version: "v0", Fence: 0}))
			g.Expect(scopeFence(t, b, scope)).To(Equal(int64(42)))
			g.Expect(recordedFence(t, b, op)).To(BeZero())
		})
	}
}
