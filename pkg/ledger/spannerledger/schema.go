package spannerledger

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Schema is the DDL of the ledger's tables, in order. The row deletion policy on runs
// makes Spanner delete a run past expire_at by itself (within about three days). Effects
// have no policy of their own: they are interleaved in their run and deleted with it
// (ON DELETE CASCADE), so an effect lives exactly as long as its run.
//
// Statements are only ever appended (a column added, an index replaced by DROP INDEX and
// CREATE INDEX), never changed: a database created by an earlier Schema gets the same
// statements (Migrate applies those it lacks), and Terraform applies appended statements
// in place where it would replace the database for a changed one.
var Schema = []string{
	`CREATE TABLE runs (
		run_id STRING(64) NOT NULL,
		namespace STRING(MAX) NOT NULL,
		job STRING(MAX) NOT NULL,
		run_key STRING(MAX) NOT NULL,
		schedule_time TIMESTAMP,
		payload_hash STRING(MAX) NOT NULL,
		payload BYTES(MAX),
		status STRING(16) NOT NULL,
		attempt INT64 NOT NULL,
		attempt_id STRING(MAX) NOT NULL,
		deadline TIMESTAMP,
		not_before TIMESTAMP,
		attempts_made INT64 NOT NULL,
		last_error STRING(MAX) NOT NULL,
		created_at TIMESTAMP NOT NULL,
		updated_at TIMESTAMP NOT NULL,
		completed_at TIMESTAMP,
		expire_at TIMESTAMP NOT NULL,
		history STRING(MAX)
	) PRIMARY KEY (run_id),
	ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))`,
	// The first release's indexes, each led by a time or by the status: replaced below.
	`CREATE NULL_FILTERED INDEX runs_by_deadline ON runs (deadline)`,
	`CREATE INDEX runs_by_expire_at ON runs (expire_at)`,
	`CREATE INDEX runs_by_created ON runs (created_at DESC)`,
	`CREATE INDEX runs_by_status_created ON runs (status, created_at DESC)`,
	`CREATE INDEX runs_by_job_created ON runs (job, created_at DESC)`,
	`CREATE INDEX runs_by_namespace_created ON runs (namespace, created_at DESC)`,
	`CREATE INDEX runs_by_updated ON runs (updated_at DESC)`,
	`CREATE INDEX runs_by_status_updated ON runs (status, updated_at DESC)`,
	`CREATE TABLE effects (
		run_id STRING(64) NOT NULL,
		name STRING(MAX) NOT NULL,
		effect_key STRING(64) NOT NULL,
		status STRING(16) NOT NULL,
		attempt INT64 NOT NULL,
		created_at TIMESTAMP NOT NULL,
		updated_at TIMESTAMP NOT NULL,
		done_at TIMESTAMP,
		expire_at TIMESTAMP NOT NULL,
		ref STRING(MAX) NOT NULL
	) PRIMARY KEY (run_id, name),
	INTERLEAVE IN PARENT runs ON DELETE CASCADE`,
	`ALTER TABLE runs ADD COLUMN result BYTES(MAX)`,
	`ALTER TABLE runs ADD COLUMN progress BYTES(MAX)`,
	// The shard of a run (Shards of them): the value of its ID's first hex digit, computed
	// and stored by Spanner, so no write sends it. Every index below leads with it: an
	// index led by a time (or by a status, then a time) takes every write at the current
	// time in one key range, the hot spot of
	// https://cloud.google.com/spanner/docs/schema-design; led by the shard, the writes
	// spread over Shards ranges, and the listing, the rescue and the sweep read each shard.
	`ALTER TABLE runs ADD COLUMN shard INT64 AS (STRPOS('0123456789abcdef', SUBSTR(run_id, 1, 1)) - 1) STORED`,
	// Live runs only: a terminal run's deadline is NULL.
	`CREATE NULL_FILTERED INDEX runs_by_shard_deadline ON runs (shard, deadline)`,
	`CREATE INDEX runs_by_shard_expire_at ON runs (shard, expire_at)`,
	// The operators' listing (List): newest first, by creation or by update time,
	// unfiltered or with one equality filter; the run ID, the primary key, breaks ties.
	`CREATE INDEX runs_by_shard_created ON runs (shard, created_at DESC)`,
	`CREATE INDEX runs_by_shard_status_created ON runs (shard, status, created_at DESC)`,
	`CREATE INDEX runs_by_shard_job_created ON runs (shard, job, created_at DESC)`,
	`CREATE INDEX runs_by_shard_namespace_created ON runs (shard, namespace, created_at DESC)`,
	`CREATE INDEX runs_by_shard_updated ON runs (shard, updated_at DESC)`,
	`CREATE INDEX runs_by_shard_status_updated ON runs (shard, status, updated_at DESC)`,
	`DROP INDEX runs_by_deadline`,
	`DROP INDEX runs_by_expire_at`,
	`DROP INDEX runs_by_created`,
	`DROP INDEX runs_by_status_created`,
	`DROP INDEX runs_by_job_created`,
	`DROP INDEX runs_by_namespace_created`,
	`DROP INDEX runs_by_updated`,
	`DROP INDEX runs_by_status_updated`,
}

// Shards is the number of values of the runs' shard column (Schema): the queries that
// read a time index read each shard.
const Shards = 16

// Migrate creates the ledger's tables in the database db
// (projects/P/instances/I/databases/D) when they are missing, through the database admin
// client, and reports whether it did; in a database an earlier Schema created, it applies
// the statements of Schema the database lacks (pending), in order. The database must
// exist (Terraform creates it). Teams that manage the schema in a pipeline apply Schema
// there and open with migrate=false.
//
// Instances that start together may both find the tables missing, or the same
// statements pending: the loser's DDL fails (the names exist, or Spanner refuses a schema
// change while another is in progress), and Migrate then waits, for at most migrateWait,
// until it finds the winner's schema, and reports success. A new index is backfilled
// before its statement completes: on a large database, apply Schema ahead of the
// upgrade (Terraform does), or Open waits for it.
func Migrate(ctx context.Context, admin *database.DatabaseAdminClient, db string) (bool, error) {
	exists, err := hasLedgerTables(ctx, admin, db)
	if err != nil {
		return false, err
	}
	if exists {
		return false, upgrade(ctx, admin, db)
	}
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: Schema})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err == nil {
		return true, nil
	}
	for give := time.Now().Add(migrateWait); ; {
		if exists, again := hasLedgerTables(ctx, admin, db); again == nil && exists {
			return false, nil
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(give) {
			return false, fmt.Errorf("spannerledger: create the ledger's tables in %s: %w", db, err)
		}
		if err := pause(ctx); err != nil {
			return false, fmt.Errorf("spannerledger: create the ledger's tables in %s: %w", db, err)
		}
	}
}

// pause waits a little for another instance's schema change, or for ctx.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

// upgrade applies the statements of Schema that the database db, created by an earlier
// Schema, lacks (pending). Instances that start together may both try: a loser's DDL
// fails, and it reads the schema again until nothing is pending, for at most migrateWait.
func upgrade(ctx context.Context, admin *database.DatabaseAdminClient, db string) error {
	give := time.Now().Add(migrateWait)
	for {
		ddl, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
		if err != nil {
			return interpretError("read the schema of "+db, err)
		}
		todo := pending(ddl.Statements)
		if len(todo) == 0 {
			return nil
		}
		op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: todo})
		if err == nil {
			err = op.Wait(ctx)
		}
		if err == nil {
			continue // read again: nothing is pending now
		}
		if time.Now().After(give) {
			return fmt.Errorf("spannerledger: apply %q to %s: %w", todo, db, err)
		}
		if err := pause(ctx); err != nil {
			return fmt.Errorf("spannerledger: apply %q to %s: %w", todo, db, err)
		}
	}
}

// Patterns of the statements pending tells apart.
var (
	addColumnStmt = regexp.MustCompile(`^ALTER TABLE (\w+) ADD COLUMN (\w+)`)
	createIndex   = regexp.MustCompile(`^CREATE (?:UNIQUE )?(?:NULL_FILTERED )?INDEX (\w+)`)
	dropIndex     = regexp.MustCompile(`^DROP INDEX (\w+)`)
)

// pending returns the statements of Schema that the database whose DDL is ddl (as
// GetDatabaseDdl returns it; its tables exist) lacks, in Schema's order: an ADD COLUMN
// whose column is missing, a CREATE INDEX whose index is missing (unless a later
// statement drops it), a DROP INDEX whose index is there.
func pending(ddl []string) []string {
	indexes := map[string]bool{}
	for _, s := range ddl {
		if m := createIndex.FindStringSubmatch(s); m != nil {
			indexes[m[1]] = true
		}
	}
	dropped := map[string]bool{}
	for _, s := range Schema {
		if m := dropIndex.FindStringSubmatch(s); m != nil {
			dropped[m[1]] = true
		}
	}
	var out []string
	for _, s := range Schema {
		if m := addColumnStmt.FindStringSubmatch(s); m != nil && !hasColumn(ddl, m[1], m[2]) {
			out = append(out, s)
		}
		if m := createIndex.FindStringSubmatch(s); m != nil && !indexes[m[1]] && !dropped[m[1]] {
			out = append(out, s)
		}
		if m := dropIndex.FindStringSubmatch(s); m != nil && indexes[m[1]] {
			out = append(out, s)
		}
	}
	return out
}

// hasColumn reports whether the CREATE TABLE statement of table among ddl (as Spanner
// returns it: one column per line) has column.
func hasColumn(ddl []string, table, column string) bool {
	for _, s := range ddl {
		if !hasTable(s, table) {
			continue
		}
		for _, line := range strings.Split(s, "\n") {
			if f := strings.Fields(strings.TrimSpace(line)); len(f) > 0 && f[0] == column {
				return true
			}
		}
	}
	return false
}

// migrateWait bounds how long Migrate waits for another instance's schema change.
const migrateWait = time.Minute

func hasLedgerTables(ctx context.Context, admin *database.DatabaseAdminClient, db string) (bool, error) {
	ddl, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
	if err != nil {
		return false, interpretError("read the schema of "+db, err)
	}
	for _, s := range ddl.Statements {
		if hasTable(s, "runs") {
			return true, nil
		}
	}
	return false, nil
}

func hasTable(ddl, table string) bool {
	var name string
	_, err := fmt.Sscanf(ddl, "CREATE TABLE %s", &name)
	return err == nil && name == table
}
