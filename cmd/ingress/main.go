// Command ingress is runonce's HTTP ingress: point Cloud Scheduler (or cron, or a webhook)
// at POST /v1/jobs/{job}; it claims the run in the ledger, publishes it to Pub/Sub and
// answers 202 in milliseconds. With -dev it runs the whole pipeline in one process.
// Every flag is also read from RUNONCE_<FLAG>; see the README's configuration reference.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runonce/runonce/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.RunIngress(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "ingress:", err)
		os.Exit(1)
	}
}
