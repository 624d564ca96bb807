package fencesql

import (
	"context"
	"fmt"
)

// OperationsTable records applied operation IDs.
const OperationsTable = "fencedlease_operations"

// Schema creates the operations table: one row per applied operation, with
// the fence it was applied under and when. Rows are never deleted by this
// package; prune old ones if retries cannot be that late.
const Schema = `CREATE TABLE IF NOT EXISTS ` + OperationsTable + ` (
    op_id      text        PRIMARY KEY,
    fence      bigint      NOT NULL CHECK (fence > 0),
    applied_at timestamptz NOT NULL DEFAULT now()
)`

const insertOperation = `INSERT INTO ` + OperationsTable + ` (op_id, fence) VALUES ($1, $2) ON CONFLICT (op_id) DO NOTHING`

// EnsureSchema creates the operations table and the fences table
// (FencesSchema) if they do not exist.
func EnsureSchema(ctx context.Context, ex Execer) error {
	if _, err := ex.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create %s: %w", OperationsTable, err)
	}
	if _, err := ex.Exec(ctx, FencesSchema); err != nil {
		return fmt.Errorf("create %s: %w", FencesTable, err)
	}
	return nil
}
