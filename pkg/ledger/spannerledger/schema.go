package spannerledger

import (
	"context"
	"fmt"
	"sort"
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
	// Live runs only: a terminal run's deadline is NULL.
	`CREATE NULL_FILTERED INDEX runs_by_deadline ON runs (deadline)`,
	`CREATE INDEX runs_by_expire_at ON runs (expire_at)`,
	// The operators' listing (List): newest first, by creation or by update time,
	// unfiltered or with one equality filter; the run ID, the primary key, breaks ties.
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
	// Columns added since: appended, never folded into the CREATE TABLE above, so that a
	// database created earlier (or by Terraform, whose ddl list only grows) gets them with
	// the same statements (Migrate applies those it lacks).
	`ALTER TABLE runs ADD COLUMN result BYTES(MAX)`,
	`ALTER TABLE runs ADD COLUMN progress BYTES(MAX)`,
}

// addedColumns are the ALTER TABLE … ADD COLUMN statements of Schema, by the column they
// add.
func addedColumns() map[string]string {
	out := map[string]string{}
	for _, s := range Schema {
		var table, column string
		if _, err := fmt.Sscanf(s, "ALTER TABLE %s ADD COLUMN %s", &table, &column); err == nil {
			out[table+"."+column] = s
		}
	}
	return out
}

// Migrate creates the ledger's tables in the database db
// (projects/P/instances/I/databases/D) when they are missing, through the database admin
// client, and reports whether it did. The database must exist (Terraform creates it).
// Teams that manage the schema in a pipeline apply Schema there and open with
// migrate=false.
//
// Instances that start together may both find the tables missing: the loser's DDL fails
// (the names exist, or Spanner refuses a schema change while another is in progress),
// and Migrate then waits, for at most migrateWait, until it finds the winner's tables,
// and reports success.
func Migrate(ctx context.Context, admin *database.DatabaseAdminClient, db string) (bool, error) {
	exists, err := hasLedgerTables(ctx, admin, db)
	if err != nil {
		return false, err
	}
	if exists {
		return false, addMissingColumns(ctx, admin, db)
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
		select { // another instance's schema change is in progress: wait for its tables
		case <-ctx.Done():
			return false, fmt.Errorf("spannerledger: create the ledger's tables in %s: %w", db, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// addMissingColumns applies the ADD COLUMN statements of Schema whose column the
// database's tables lack (a database created by an earlier Schema). Instances that
// start together may both try; a loser finds the column there.
func addMissingColumns(ctx context.Context, admin *database.DatabaseAdminClient, db string) error {
	ddl, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
	if err != nil {
		return interpretError("read the schema of "+db, err)
	}
	var missing []string
	for key, stmt := range addedColumns() {
		table, column, _ := strings.Cut(key, ".")
		if !hasColumn(ddl.Statements, table, column) {
			missing = append(missing, stmt)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: missing})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		if again, rerr := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db}); rerr == nil {
			done := true
			for key := range addedColumns() {
				table, column, _ := strings.Cut(key, ".")
				done = done && hasColumn(again.Statements, table, column)
			}
			if done {
				return nil // another instance added them
			}
		}
		return fmt.Errorf("spannerledger: add the columns %q to %s: %w", missing, db, err)
	}
	return nil
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
