// Package fencesql makes fenced, idempotent writes to PostgreSQL, through
// database/sql or pgx v5.
//
// A fenced update carries the writer's fencing token and changes a row only
// if no newer holder has written it:
//
//	UPDATE export_targets
//	SET object_version = $1, last_fence = $2
//	WHERE id = $3 AND last_fence <= $2
//
// The comparison is <= rather than < so that the current holder can write
// the same row more than once with its token; a strictly higher stored fence
// means a newer holder has written, and the update changes nothing. Zero
// affected rows is reported as ErrStale, never as success: the token is
// stale, or the row does not exist.
//
// The fence says which holder is authorised; it does not say whether a
// request is a retry of one already applied (a timeout does not prove that
// a write failed). An operation ID answers that. [Apply] records the ID in
// the operations table and runs the fenced updates in one transaction: a
// retried ID returns ErrAlreadyApplied and changes nothing, and a stale
// attempt rolls back, so its ID is not recorded and a retry by the current
// holder can still apply it.
//
// Each protected table needs a fence column, for example
//
//	last_fence bigint NOT NULL DEFAULT 0
//
// and the operations table is created by [EnsureSchema] (see [Schema]).
//
// The statements use PostgreSQL syntax ($n parameters, ON CONFLICT).
package fencesql
