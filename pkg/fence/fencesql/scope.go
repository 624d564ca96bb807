package fencesql

import (
	"context"
	"errors"
	"fmt"
)

// FencesTable keeps the highest fence each scope has seen.
const FencesTable = "fencedlease_fences"

// FencesSchema creates the fences table: one row per scope (a lock: a
// FencedLease, or one shard of a FencedShardSet), with the highest fence
// that has written under it.
const FencesSchema = `CREATE TABLE IF NOT EXISTS ` + FencesTable + ` (
    scope text   PRIMARY KEY,
    fence bigint NOT NULL CHECK (fence > 0)
)`

// raiseFence inserts the scope's fence, or raises it when it is not higher
// than ours. The row lock of ON CONFLICT DO UPDATE makes a concurrent
// transaction on the same scope wait, then judge the committed fence: a
// lower fence never lands after a higher one committed.
const raiseFence = `INSERT INTO ` + FencesTable + ` AS f (scope, fence) VALUES ($1, $2)
ON CONFLICT (scope) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence`

// ShardScope names the scope of one shard of a FencedShardSet:
// "<namespace>/<set>/<key>". Every writer of the shard must use the same
// name.
func ShardScope(namespace, set, key string) string {
	return namespace + "/" + set + "/" + key
}

// LeaseScope names the scope of a FencedLease: "<namespace>/<name>".
func LeaseScope(namespace, name string) string {
	return namespace + "/" + name
}

// RaiseFence records that fence writes under scope, inside the caller's
// transaction: the scope's stored fence becomes fence when it is not higher
// (an absent scope is created). It returns an error wrapping ErrStale when
// the scope has seen a higher fence: a newer grant of the same lock has
// written, whatever rows it touched. Call it before the writes and roll
// back on error. The scope's row stays locked until the transaction ends,
// so writes of one scope are serialised.
func RaiseFence(ctx context.Context, ex Execer, scope string, fence int64) error {
	if scope == "" {
		return errors.New("fence scope: empty scope name")
	}
	if fence <= 0 {
		return fmt.Errorf("fence scope %q: invalid fence %d: must be positive", scope, fence)
	}
	n, err := ex.Exec(ctx, raiseFence, scope, fence)
	if err != nil {
		return fmt.Errorf("fence scope %q with fence %d: %w", scope, fence, err)
	}
	if n == 0 {
		return fmt.Errorf("fence scope %q with fence %d: a higher fence has written: %w", scope, fence, ErrStale)
	}
	return nil
}

// ApplyScoped is Apply under a scope's fence: in one transaction it records
// opID, raises the scope's fence (RaiseFence) and runs the fenced updates.
// Once any write of a newer grant of the scope has committed, every write of
// an older one fails with ErrStale, on any row. A retried opID returns
// ErrAlreadyApplied and changes nothing.
func ApplyScoped(ctx context.Context, db DB, scope, opID string, fence int64, updates ...Update) error {
	return ApplyScopedFunc(ctx, db, scope, opID, fence, func(ctx context.Context, tx Execer) error {
		for _, u := range updates {
			if err := Exec(ctx, tx, fence, u); err != nil {
				return err
			}
		}
		return nil
	})
}

// ApplyScopedFunc is ApplyScoped with arbitrary statements: fn runs after
// opID is recorded and the scope's fence raised.
func ApplyScopedFunc(ctx context.Context, db DB, scope, opID string, fence int64, fn func(ctx context.Context, tx Execer) error) error {
	return ApplyFunc(ctx, db, opID, fence, func(ctx context.Context, tx Execer) error {
		if err := RaiseFence(ctx, tx, scope, fence); err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}
