package spannerledger

import (
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
)

// TestMissingEmulatorVariable: on a laptop without credentials, a spanner:// ledger that
// fails for want of them says that SPANNER_EMULATOR_HOST is unset, whether it migrates
// (the admin client) or not. Not parallel: it sets the process's environment.
func TestMissingEmulatorVariable(t *testing.T) {
	for k, v := range gcpenv.LaptopEnv(t.TempDir(), gcpenv.SpannerEmulator) {
		t.Setenv(k, v)
	}
	for _, o := range []*Options{nil, {NoMigrate: true}} {
		_, err := Open(t.Context(), "projects/p/instances/i/databases/d", o)
		if !gcpenv.NoCredentials(err) || !strings.Contains(err.Error(), "SPANNER_EMULATOR_HOST is unset: to use the emulator, export SPANNER_EMULATOR_HOST=") {
			t.Errorf("Open(%+v) without credentials nor emulator = %v; want the missing credentials and the unset SPANNER_EMULATOR_HOST", o, err)
		}
	}
}
