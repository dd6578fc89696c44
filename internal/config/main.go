package config

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Command is a command's body: flags in args (and their environment variables through
// getenv), output on stdout and stderr, until ctx is done.
type Command func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs a command as a process: SIGTERM (Cloud Run's) and interrupts cancel its
// context; an error is printed after the command's name and exits 1; -h exits 2.
func Main(name string, run Command) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
