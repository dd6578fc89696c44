package app_test

import (
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/firestoreledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/ledger/postgres"
	"github.com/runonce/runonce/pkg/ledger/redisledger"
	"github.com/runonce/runonce/pkg/ledger/spannerledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
)

// TestUnknownSchemeNamesThePackageToImport: opening a URL whose backend the program does
// not link names the package to import. (Here, where every backend is linked, rather
// than in pkg/ledger: a test there importing them all would put them in the go.sum of
// every module that imports pkg/ledger.) Before, it said only "unknown scheme", and a
// worker of one's own joining -dev (sqlite://) had to guess the import. Every scheme the
// backends register (their Scheme constants, as imported here) maps to its own package,
// and only schemes they register are claimed.
func TestUnknownSchemeNamesThePackageToImport(t *testing.T) {
	t.Parallel()
	var bare ledger.URLMux // links no backend
	for scheme, pkg := range map[string]string{
		sqlite.Scheme: "sqlite", postgres.Scheme: "postgres", postgres.SchemeAlias: "postgres",
		firestoreledger.Scheme: "firestoreledger", spannerledger.Scheme: "spannerledger",
		redisledger.Scheme: "redisledger", redisledger.SchemeTLS: "redisledger", memory.Scheme: "memory",
	} {
		raw := scheme + "://user:secret@host/x"
		_, err := bare.Open(t.Context(), raw)
		want := `import _ "github.com/runonce/runonce/pkg/ledger/` + pkg + `"`
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s) without its backend = %v; want it to name %s and no password", raw, err, want)
		}
	}
	if l, err := ledger.DefaultURLMux().Open(t.Context(), "sqlite://"+t.TempDir()+"/x.db"); err != nil {
		t.Errorf("with the backend imported, sqlite:// opens: %v", err)
	} else {
		l.Close()
	}
	registered := ledger.DefaultURLMux().Schemes()
	if len(registered) != 8 {
		t.Errorf("the imported backends register %v; the table above lists 8 schemes", registered)
	}
	for _, s := range registered {
		if ledger.BackendPackage(s) == "" {
			t.Errorf("scheme %s is registered but BackendPackage names no package for it", s)
		}
	}
	_, err := bare.Open(t.Context(), "mysql://h/db")
	if err == nil || !strings.Contains(err.Error(), "runonce's backends: sqlite, postgres") {
		t.Errorf("Open of a scheme runonce ships no backend for = %v; want the list of backends", err)
	}
}
