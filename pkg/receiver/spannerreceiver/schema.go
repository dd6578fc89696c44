package spannerreceiver

import (
	"context"
	"fmt"
	"time"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Schema is the DDL of the store's tables, in order. Their row deletion policies make
// Spanner delete a record past expire_at by itself (within about three days); the store
// treats one still there as absent.
var Schema = []string{
	`CREATE TABLE receiver_keys (
		scoped_key STRING(64) NOT NULL,
		fingerprint STRING(MAX) NOT NULL,
		state STRING(16) NOT NULL,
		token STRING(MAX) NOT NULL,
		attempt INT64 NOT NULL,
		lease_until TIMESTAMP,
		status INT64,
		header BYTES(MAX),
		body BYTES(MAX),
		body_omitted BOOL NOT NULL,
		created_at TIMESTAMP NOT NULL,
		updated_at TIMESTAMP NOT NULL,
		expire_at TIMESTAMP NOT NULL
	) PRIMARY KEY (scoped_key),
	ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))`,
	`CREATE INDEX receiver_keys_by_expire_at ON receiver_keys (expire_at)`,
	`CREATE TABLE receiver_fences (
		scoped_run STRING(64) NOT NULL,
		attempt INT64 NOT NULL,
		expire_at TIMESTAMP NOT NULL
	) PRIMARY KEY (scoped_run),
	ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))`,
	`CREATE INDEX receiver_fences_by_expire_at ON receiver_fences (expire_at)`,
}

// migrateWait bounds how long Migrate waits for another instance's schema change.
const migrateWait = time.Minute

// Migrate creates the store's tables in the database db
// (projects/P/instances/I/databases/D) when they are missing, and reports whether it
// did. The database must exist. Instances that start together may both find the tables
// missing: the loser's DDL fails, and Migrate waits (at most a minute) until it finds
// the winner's tables.
func Migrate(ctx context.Context, admin *database.DatabaseAdminClient, db string) (bool, error) {
	if ok, err := hasTables(ctx, admin, db); err != nil || ok {
		return false, err
	}
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: Schema})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err == nil {
		return true, nil
	}
	for give := time.Now().Add(migrateWait); ; {
		if ok, again := hasTables(ctx, admin, db); again == nil && ok {
			return false, nil
		}
		if code := status.Code(err); (code != codes.FailedPrecondition && code != codes.AlreadyExists) || time.Now().After(give) {
			return false, fmt.Errorf("spannerreceiver: create the store's tables in %s: %w", db, err)
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("spannerreceiver: create the store's tables in %s: %w", db, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func hasTables(ctx context.Context, admin *database.DatabaseAdminClient, db string) (bool, error) {
	ddl, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
	if err != nil {
		return false, fmt.Errorf("spannerreceiver: read the schema of %s: %w", db, err)
	}
	var keys, fences bool
	for _, s := range ddl.Statements {
		var name string
		if _, err := fmt.Sscanf(s, "CREATE TABLE %s", &name); err == nil {
			keys = keys || name == "receiver_keys"
			fences = fences || name == "receiver_fences"
		}
	}
	return keys && fences, nil
}
