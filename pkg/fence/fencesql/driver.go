package fencesql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs one statement and reports how many rows it affected. SQLExec
// and PgxExec adapt the drivers' connections and transactions.
type Execer interface {
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
}

// Tx is a transaction as Apply uses it.
type Tx interface {
	Execer
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DB starts transactions. SQL and Pgx adapt the drivers' pools and
// connections.
type DB interface {
	Begin(ctx context.Context) (Tx, error)
}

// SQLExecContext is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type SQLExecContext interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQLExec adapts a database/sql *sql.DB, *sql.Conn or *sql.Tx.
func SQLExec(e SQLExecContext) Execer { return sqlExecer{e} }

type sqlExecer struct{ e SQLExecContext }

func (s sqlExecer) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.e.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("rows affected: %w", err)
	}
	return n, nil
}

// SQL adapts a database/sql pool; transactions use its default isolation.
func SQL(db *sql.DB) DB { return sqlDB{db} }

type sqlDB struct{ db *sql.DB }

func (s sqlDB) Begin(ctx context.Context) (Tx, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{sqlExecer{tx}, tx}, nil
}

type sqlTx struct {
	sqlExecer
	tx *sql.Tx
}

func (s sqlTx) Commit(context.Context) error   { return s.tx.Commit() }
func (s sqlTx) Rollback(context.Context) error { return s.tx.Rollback() }

// PgxExecContext is what *pgx.Conn, *pgxpool.Pool and pgx.Tx have in common.
type PgxExecContext interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PgxExec adapts a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
func PgxExec(e PgxExecContext) Execer { return pgxExecer{e} }

type pgxExecer struct{ e PgxExecContext }

func (p pgxExecer) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.e.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// PgxBeginner is what *pgx.Conn, *pgxpool.Pool and pgx.Tx (a savepoint)
// have in common.
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Pgx adapts a *pgx.Conn or *pgxpool.Pool.
func Pgx(db PgxBeginner) DB { return pgxDB{db} }

type pgxDB struct{ db PgxBeginner }

func (p pgxDB) Begin(ctx context.Context) (Tx, error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTx{pgxExecer{tx}, tx}, nil
}

type pgxTx struct {
	pgxExecer
	tx pgx.Tx
}

func (p pgxTx) Commit(ctx context.Context) error   { return p.tx.Commit(ctx) }
func (p pgxTx) Rollback(ctx context.Context) error { return p.tx.Rollback(ctx) }
