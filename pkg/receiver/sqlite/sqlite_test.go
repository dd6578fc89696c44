package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
	"github.com/runonce/runonce/pkg/receiver/sqlite"
)

func open(tb testing.TB) receiver.Store {
	tb.Helper()
	s, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "receiver.db"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { receivertest.Run(t, receivertest.Harness{Open: open}) }
