package fencesql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencedlease/fencedlease/pkg/fence/fencesql"
	"github.com/fencedlease/fencedlease/test/harness"
)

// backend is one way of talking to PostgreSQL.
type backend struct {
	name     string
	db       fencesql.DB
	exec     fencesql.Execer
	queryRow func(ctx context.Context, q string, args []any, dest ...any) error
}

// backends connects through database/sql (pgx's stdlib driver) and pgx.
func backends(t *testing.T) []backend {
	t.Helper()
	harness.Needs(t, harness.PostgreSQL)
	sqlDB, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	bs := []backend{
		{
			name: "database-sql", db: fencesql.SQL(sqlDB), exec: fencesql.SQLExec(sqlDB),
			queryRow: func(ctx context.Context, q string, args []any, dest ...any) error {
				return sqlDB.QueryRowContext(ctx, q, args...).Scan(dest...)
			},
		},
		{
			name: "pgx", db: fencesql.Pgx(conn), exec: fencesql.PgxExec(conn),
			queryRow: func(ctx context.Context, q string, args []any, dest ...any) error {
				return conn.QueryRow(ctx, q, args...).Scan(dest...)
			},
		},
	}
	for _, b := range bs {
		if err := fencesql.EnsureSchema(t.Context(), b.exec); err != nil {
			t.Fatal(err)
		}
	}
	return bs
}

// target is the row of the seeds' export_targets table, in a table of its
// own for each (sub)test.
type target struct {
	b     backend
	table string
	id    string
}

// newTarget creates the table with one row: version v0, last_fence 0.
func newTarget(t *testing.T, b backend) target {
	t.Helper()
	tg := target{b: b, table: "export_targets_" + sanitize(t.Name()), id: "report-monthly"}
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + tg.table,
		"CREATE TABLE " + tg.table + " (id text PRIMARY KEY, object_version text NOT NULL, last_fence bigint NOT NULL DEFAULT 0)",
		"INSERT INTO " + tg.table + " (id, object_version) VALUES ('" + tg.id + "', 'v0')",
	} {
		if _, err := b.exec.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return tg
}

func sanitize(s string) string {
	out := []rune{}
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			out = append(out, r)
		} else {
			out = append(out, '_')
		}
	}
	return strings.ToLower(string(out))
}

// write is the fenced update that sets the row's version.
func (tg target) write(version string) fencesql.Update {
	return fencesql.Update{
		Table: tg.table,
		Set:   []fencesql.Column{{Name: "object_version", Value: version}},
		Where: []fencesql.Column{{Name: "id", Value: tg.id}},
	}
}

// row is the stored version and fence.
type row struct {
	Version string
	Fence   int64
}

func (tg target) row(t *testing.T) row {
	t.Helper()
	var r row
	err := tg.b.queryRow(t.Context(), "SELECT object_version, last_fence FROM "+tg.table+" WHERE id = $1", []any{tg.id}, &r.Version, &r.Fence)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// recordedFence returns the fence opID was recorded with, or 0 when the
// operations table does not have it.
func recordedFence(t *testing.T, b backend, opID string) int64 {
	t.Helper()
	var fence int64
	err := b.queryRow(t.Context(), "SELECT coalesce(max(fence), 0) FROM "+fencesql.OperationsTable+" WHERE op_id = $1", []any{opID}, &fence)
	if err != nil {
		t.Fatal(err)
	}
	return fence
}
