// Command worker runs runonce jobs: it pulls runs from a Pub/Sub subscription (or is
// pushed them on POST /v1/push), holds a renewable lease on each run while its job works,
// and completes it or releases it for a retry. Every flag is also read from
// RUNONCE_<FLAG>; see the README's configuration reference.
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
	if err := app.RunWorker(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
