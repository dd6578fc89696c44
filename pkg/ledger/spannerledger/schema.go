package spannerledger

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"time"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Schema is the DDL of the ledger's tables, in order: the statements of the files
// migrations/NNNN_description.sql, each ended by a semicolon, in the files' order (their
// comment lines say why each statement is there). The row deletion policy on runs makes
// Spanner delete a run past expire_at by itself (within about three days). Effects have
// no policy of their own: they are interleaved in their run and deleted with it (ON
// DELETE CASCADE), so an effect lives exactly as long as its run.
//
// Statements are only ever appended (a column added, an index replaced by DROP INDEX and
// CREATE INDEX), in a new file, never changed: a database created by an earlier Schema
// gets the same statements (Migrate applies those it lacks), and Terraform applies
// appended statements in place where it would replace the database for a changed one.
var Schema = readSchema()

//go:embed migrations/*.sql
var migrations embed.FS

// readSchema reads the statements of the embedded migrations, in their names' order:
// each file's lines but its comments, split after each line that ends with a semicolon.
func readSchema() []string {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is valid: cannot happen
	}
	slices.Sort(names)
	var out []string
	for _, name := range names {
		b, err := migrations.ReadFile(name)
		if err != nil {
			panic(err) // the files are embedded: cannot happen
		}
		var stmt []string
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			stmt = append(stmt, line)
			if s, ok := strings.CutSuffix(strings.TrimRight(strings.Join(stmt, ""), "\n"), ";"); ok {
				out = append(out, s)
				stmt = nil
			}
		}
		if strings.TrimSpace(strings.Join(stmt, "")) != "" {
			panic("spannerledger: " + name + " ends with a statement without its semicolon")
		}
	}
	return out
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
