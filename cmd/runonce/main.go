// Command runonce operates the runs of a runonce ingress: list and show runs, retry,
// cancel and release them (internal/cli; run it with --help, or COMMAND --help).
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/runonce/runonce/internal/cli"
	"github.com/runonce/runonce/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], config.OSEnv(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
