package ledgertest_test

import (
	"testing"
	"testing/fstest"

	"github.com/runonce/runonce/pkg/ledger/ledgertest"
)

// TestCheckMigrationNames runs the check on good and bad sets of names, the bad ones
// under a recorder that must see a failure.
func TestCheckMigrationNames(t *testing.T) {
	set := func(names ...string) fstest.MapFS {
		m := fstest.MapFS{}
		for _, n := range names {
			m[n] = &fstest.MapFile{}
		}
		return m
	}
	ledgertest.CheckMigrationNames(t, set("0001_init.sql", "0002_more.sql", "README.md"))
	for name, fsys := range map[string]fstest.MapFS{
		"five digits": set("00001_init.sql"),
		"gap":         set("0001_init.sql", "0003_more.sql"),
		"repeat":      set("0001_init.sql", "0001_other.sql"),
		"from zero":   set("0000_init.sql"),
		"no words":    set("0001.sql"),
		"upper case":  set("0001_Init.sql"),
		"none":        set(),
	} {
		r := &recorder{TB: t}
		func() {
			defer func() { _ = recover() }()
			ledgertest.CheckMigrationNames(r, fsys)
		}()
		if !r.failed {
			t.Errorf("%s: the check passed", name)
		}
	}
}

// recorder is a testing.TB that records a failure instead of reporting it; Fatal and
// Fatalf end the check by panicking (the caller recovers).
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true; panic(r) }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; panic(r) }
