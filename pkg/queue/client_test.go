package queue_test

import (
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
	"github.com/runonce/runonce/pkg/queue"
)

// TestMissingEmulatorVariable: on a laptop without credentials, a pubsub:// topic or
// subscription that fails for want of them says that PUBSUB_EMULATOR_HOST is unset. Not
// parallel: it sets the process's environment.
func TestMissingEmulatorVariable(t *testing.T) {
	for k, v := range gcpenv.LaptopEnv(t.TempDir(), gcpenv.PubSubEmulator) {
		t.Setenv(k, v)
	}
	_, perr := queue.OpenPublisher(t.Context(), "pubsub://laptop-project/runs", nil)
	_, serr := queue.OpenSubscriber(t.Context(), "pubsub://laptop-project/runs-worker", nil)
	for what, err := range map[string]error{"OpenPublisher": perr, "OpenSubscriber": serr} {
		if !gcpenv.NoCredentials(err) || !strings.Contains(err.Error(), "PUBSUB_EMULATOR_HOST is unset: to use the emulator, export PUBSUB_EMULATOR_HOST=") {
			t.Errorf("%s without credentials nor emulator = %v; want the missing credentials and the unset PUBSUB_EMULATOR_HOST", what, err)
		}
	}
}
