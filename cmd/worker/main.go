// Command worker runs runonce jobs: it pulls runs from a Pub/Sub subscription (or is
// pushed them on POST /v1/push), holds a renewable lease on each run while its job works,
// and completes it or releases it for a retry. Every flag is also read from
// RUNONCE_<FLAG>; see docs/configuration.md.
package main

import (
	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/config"
)

func main() { config.Main("worker", app.RunWorker) }
