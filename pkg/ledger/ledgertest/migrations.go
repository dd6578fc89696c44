package ledgertest

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"testing"
)

// migrationName is the one numbering of every backend's migrations: four digits from
// 0001, an underscore, and what the migration does.
var migrationName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// CheckMigrationNames fails t unless the .sql files at the root of migrations are named
// NNNN_description.sql and numbered 0001, 0002, … without a gap or a repeat, in the
// order of their names: the order every backend applies them in, and the number by which
// PostgreSQL (goose's version) and SQLite (PRAGMA user_version, the count applied)
// record how far a database got.
func CheckMigrationNames(t testing.TB, migrations fs.FS) {
	t.Helper()
	names, err := fs.Glob(migrations, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no migrations (*.sql) at the root of the file system")
	}
	slices.Sort(names)
	for i, name := range names {
		m := migrationName.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("migration %s: want NNNN_description.sql (four digits, then lower-case words joined by _)", name)
			continue
		}
		if want := fmt.Sprintf("%04d", i+1); m[1] != want {
			t.Errorf("migration %s is number %d of %d in order: want it named %s_…", name, i+1, len(names), want)
		}
	}
}
