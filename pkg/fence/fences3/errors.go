package fences3

import "errors"

var (
	// ErrStale means the pointer holds a higher fence than the writer's: a
	// newer holder has written. Nothing was changed by this call (its
	// version object may exist, but no reader is pointed at it).
	ErrStale = errors.New("stale fence: a newer holder has written the object")
	// ErrAlreadyApplied means the operation ID moved the pointer before
	// (this call is a replay, or a holder before this one ran the same
	// operation and no newer write followed): the operation is done and this
	// call changed nothing. For a retry it is the outcome to expect; treat
	// it as success. A writer whose fence is lower than the pointer's gets
	// ErrStale instead, even if a newer holder applied the operation.
	ErrAlreadyApplied = errors.New("operation already applied")
	// ErrUnknownOutcome means a write's reply was lost and reading back
	// could not tell whether it was applied (the store could not be read,
	// or more than RecentOps other writes moved the pointer meanwhile).
	// Replay the operation with the same ID and fence: it is applied at
	// most once. The replay answers ErrAlreadyApplied (it was), applies it
	// (it was not), or ErrOutcomeLost (the pointer no longer remembers).
	ErrUnknownOutcome = errors.New("unknown outcome: the write's reply was lost and reading back could not settle it")
	// ErrOutcomeLost means an earlier attempt of this operation under this
	// fence wrote its version, the pointer does not list the operation, and
	// more than RecentOps moves of the pointer have happened since that
	// attempt: whether it moved the pointer can no longer be known, so the
	// operation is not applied again (that could bring its content back
	// over newer writes). Nothing was changed. Treat the operation as
	// possibly applied: read the current version (Get) and decide from
	// what it holds, or write anew under a new operation ID.
	ErrOutcomeLost = errors.New("the outcome of an earlier attempt can no longer be known: not applied again")
	// ErrNotFound means the fenced object has never been written.
	ErrNotFound = errors.New("fenced object not found")
	// ErrMalformedPointer means the pointer object is not a pointer that
	// this package wrote.
	ErrMalformedPointer = errors.New("malformed pointer")
	// ErrOperationReused means a version object of this operation ID exists
	// with other content: one operation ID was used for two different
	// writes.
	ErrOperationReused = errors.New("operation ID already used for other content")
	// ErrContention means the pointer kept moving under this writer (other
	// writes with the same fence) for more attempts than allowed.
	ErrContention = errors.New("the pointer kept moving: too many concurrent writers")
)
