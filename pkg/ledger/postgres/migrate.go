package postgres

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the embedded migrations (goose SQL files), for tools that apply them
// their own way.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return sub
}

// MigrateResult reports what Migrate did.
type MigrateResult struct {
	// Applied lists the versions applied by this call, in order.
	Applied []int64
	// Version is the schema's version after the call.
	Version int64
}

// Migrate applies the embedded migrations to the database dsn names, in schema (created if
// missing; "" for the URL's schema parameter, else the connection's current schema), under a
// session advisory lock so that concurrent callers apply each migration once. It is what
// opening a ledger does unless told not to, for teams that migrate in a pipeline.
func Migrate(ctx context.Context, dsn, schema string) (*MigrateResult, error) {
	o := Options{Schema: schema}
	dsn, err := stripParams(dsn, &o)
	if err != nil {
		return nil, err
	}
	if schema != "" {
		o.Schema = schema
	}
	// The pool's parser, so that a ledger URL with pool parameters (pool_max_conns, …)
	// migrates as it is.
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	var res MigrateResult
	res.Applied, res.Version, err = migrateConfig(ctx, cfg.ConnConfig, o.Schema)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// migrate applies the migrations over connections configured like cfg and returns how many
// it applied.
func migrate(ctx context.Context, cfg *pgx.ConnConfig, schema string) (int, error) {
	applied, _, err := migrateConfig(ctx, cfg, schema)
	return len(applied), err
}

func migrateConfig(ctx context.Context, cfg *pgx.ConnConfig, schema string) (applied []int64, version int64, err error) {
	cfg = cfg.Copy()
	cfg.Tracer = nil
	lockID := migrationLockID(schema)
	if schema != "" {
		if err := createSchema(ctx, cfg, schema, lockID); err != nil {
			return nil, 0, err
		}
		// Migrations create unqualified tables, and goose its version table, in the first
		// schema of the search_path: the ledger's.
		cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()

	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(lockID),
		lock.WithLockTimeout(1, 300), // retry every second for five minutes
	)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, 0, interpretError("apply migrations in schema "+schemaName(schema), err)
	}
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	version, err = p.GetDBVersion(ctx)
	if err != nil {
		return nil, 0, interpretError("read the migration version", err)
	}
	return applied, version, nil
}

// createSchema creates schema if it is missing. CREATE SCHEMA IF NOT EXISTS is not safe
// against itself (two sessions can both find it missing and one then fails on the catalog's
// unique index), so it runs under a transaction-level advisory lock.
func createSchema(ctx context.Context, cfg *pgx.ConnConfig, schema string, lockID int64) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return interpretError("connect to create schema "+schemaName(schema), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
		return err
	})
	return interpretError("create schema "+schemaName(schema), err)
}

// migrationLockID is the advisory lock that serializes migrations of one schema, so that
// ledgers in different schemas of one database migrate independently.
func migrationLockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("runonce/ledger/postgres/migrate\x00" + schema))
	return int64(h.Sum64())
}

func schemaName(schema string) string {
	if schema == "" {
		return "(current)"
	}
	return pgx.Identifier{schema}.Sanitize()
}
