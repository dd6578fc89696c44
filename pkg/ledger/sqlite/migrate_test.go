package sqlite

import (
	"io/fs"
	"testing"

	"github.com/runonce/runonce/pkg/ledger/ledgertest"
)

// TestMigrationNames holds the embedded migrations to the numbering of every backend's:
// migrate records how many it applied (PRAGMA user_version), so a file inserted among
// them, or out of order, would skip a migration on a database already migrated.
func TestMigrationNames(t *testing.T) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.CheckMigrationNames(t, sub)
}
