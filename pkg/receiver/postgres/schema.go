package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaSQL is schema.sql, the DDL of the store's tables and functions, {s} standing for
// the schema. EnsureSchema applies it whole under an advisory lock: every statement is
// idempotent (IF NOT EXISTS, CREATE OR REPLACE), and a later version adds statements.
//
//go:embed schema.sql
var schemaSQL string

// ddl returns schemaSQL for schema.
func ddl(schema string) string {
	return strings.ReplaceAll(schemaSQL, "{s}", pgx.Identifier{schema}.Sanitize())
}

// EnsureSchema creates the store's schema, tables and functions when missing, under a
// transaction-scoped advisory lock so that instances starting together do not race.
// Open and New call it unless Options.NoMigrate.
func EnsureSchema(ctx context.Context, conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, schema string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin the receiver's schema: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('runonce/receiver/' || $1))`, schema); err != nil {
		return fmt.Errorf("postgres: lock the receiver's schema %s: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, ddl(schema)); err != nil {
		return fmt.Errorf("postgres: create the receiver's tables in schema %s: %w", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit the receiver's schema %s: %w", schema, err)
	}
	return nil
}
