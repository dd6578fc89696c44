// Command ingress is runonce's HTTP ingress: point Cloud Scheduler (or cron, or a webhook)
// at POST /v1/jobs/{job}; it claims the run in the ledger, publishes it to Pub/Sub and
// answers 202 in milliseconds. With -dev it runs the whole pipeline in one process.
// Every flag is also read from RUNONCE_<FLAG>; see docs/configuration.md.
package main

import (
	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/config"
)

func main() { config.Main("ingress", app.RunIngress) }
