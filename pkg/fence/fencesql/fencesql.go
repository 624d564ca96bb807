package fencesql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

var (
	// ErrStale means a fenced update changed no row: a newer holder has
	// written the row (its stored fence is higher), or the row does not
	// exist. The write must not be treated as done.
	ErrStale = errors.New("stale fence: no row matched (a newer holder has written it, or it does not exist)")
	// ErrAlreadyApplied means the operation ID was recorded by an earlier
	// attempt: the operation is done, and this attempt changed nothing.
	// For a retry it is the outcome to expect; treat it as success.
	ErrAlreadyApplied = errors.New("operation already applied")
)

// DefaultFenceColumn is the fence column used when Update.FenceColumn is empty.
const DefaultFenceColumn = "last_fence"

// Column is a column name and the value to set or to match.
type Column struct {
	Name  string
	Value any
}

// Update describes a fenced UPDATE of the rows matching Where.
type Update struct {
	// Table is the table name, optionally qualified by a schema ("s.t").
	Table string
	// Set lists the columns to change. The fence column is set as well.
	Set []Column
	// Where lists equality conditions, joined with AND, that select the
	// row (usually its primary key). At least one is required.
	Where []Column
	// FenceColumn is the bigint column that stores the fence of the last
	// accepted writer; DefaultFenceColumn when empty.
	FenceColumn string
}

// SQL returns the statement and its arguments for a write with fence.
// Identifiers are quoted; values are always parameters.
func (u Update) SQL(fence int64) (string, []any, error) {
	if u.Table == "" {
		return "", nil, errors.New("update: table name is empty")
	}
	if fence <= 0 {
		return "", nil, fmt.Errorf("update %s: invalid fence %d: must be positive", u.Table, fence)
	}
	if len(u.Where) == 0 {
		return "", nil, fmt.Errorf("update %s: no WHERE column: a fenced update must select its row", u.Table)
	}
	fc := u.FenceColumn
	if fc == "" {
		fc = DefaultFenceColumn
	}
	var b strings.Builder
	args := make([]any, 0, len(u.Set)+len(u.Where)+1)
	param := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	b.WriteString("UPDATE " + pgx.Identifier(strings.Split(u.Table, ".")).Sanitize() + " SET ")
	for _, c := range u.Set {
		if c.Name == "" || c.Name == fc {
			return "", nil, fmt.Errorf("update %s: invalid SET column %q", u.Table, c.Name)
		}
		b.WriteString(ident(c.Name) + " = " + param(c.Value) + ", ")
	}
	f := param(fence)
	b.WriteString(ident(fc) + " = " + f + " WHERE ")
	for _, c := range u.Where {
		if c.Name == "" {
			return "", nil, fmt.Errorf("update %s: empty WHERE column name", u.Table)
		}
		b.WriteString(ident(c.Name) + " = " + param(c.Value) + " AND ")
	}
	b.WriteString(ident(fc) + " <= " + f)
	return b.String(), args, nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// Exec runs a fenced update. It returns an error wrapping ErrStale when no
// row was changed.
func Exec(ctx context.Context, ex Execer, fence int64, u Update) error {
	query, args, err := u.SQL(fence)
	if err != nil {
		return err
	}
	n, err := ex.Exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("update %s with fence %d: %w", u.Table, fence, err)
	}
	if n == 0 {
		return fmt.Errorf("update %s with fence %d: %w", u.Table, fence, ErrStale)
	}
	return nil
}

// Apply runs updates as the operation opID with fence, exactly once: in one
// transaction it records opID (RecordOperation) and runs each fenced update
// (Exec). It returns an error wrapping ErrAlreadyApplied when opID was
// recorded before (nothing changes), and one wrapping ErrStale when an
// update changed no row (the transaction is rolled back and opID is not
// recorded).
func Apply(ctx context.Context, db DB, opID string, fence int64, updates ...Update) error {
	return ApplyFunc(ctx, db, opID, fence, func(ctx context.Context, tx Execer) error {
		for _, u := range updates {
			if err := Exec(ctx, tx, fence, u); err != nil {
				return err
			}
		}
		return nil
	})
}

// ApplyFunc is Apply with arbitrary statements: fn runs in the transaction
// after opID is recorded, and any error it returns rolls everything back.
// fn should make its writes with Exec so that they are fenced.
func ApplyFunc(ctx context.Context, db DB, opID string, fence int64, fn func(ctx context.Context, tx Execer) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("operation %q: begin: %w", opID, err)
	}
	defer func() {
		if err != nil {
			// Roll back even when ctx is cancelled.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := RecordOperation(ctx, tx, opID, fence); err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return fmt.Errorf("operation %q: %w", opID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("operation %q: commit: %w", opID, err)
	}
	return nil
}

// RecordOperation inserts opID into the operations table. Use it inside
// your own transaction, before the fenced writes, when Apply does not fit.
// It returns an error wrapping ErrAlreadyApplied when opID is already
// recorded. A concurrent attempt with the same ID waits for this
// transaction and then sees it as applied (or not, if it rolls back).
func RecordOperation(ctx context.Context, ex Execer, opID string, fence int64) error {
	if opID == "" {
		return errors.New("operation: empty operation ID")
	}
	if fence <= 0 {
		return fmt.Errorf("operation %q: invalid fence %d: must be positive", opID, fence)
	}
	n, err := ex.Exec(ctx, insertOperation, opID, fence)
	if err != nil {
		return fmt.Errorf("operation %q: record: %w", opID, err)
	}
	if n == 0 {
		return fmt.Errorf("operation %q: %w", opID, ErrAlreadyApplied)
	}
	return nil
}
