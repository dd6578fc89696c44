package config

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Command is a command's body: flags in args (and their environment variables in env),
// output on stdout and stderr, until ctx is done.
type Command func(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) error

// HardStopAfter bounds how long a command may take to exit after a second signal.
const HardStopAfter = 3 * time.Second

// Main runs a command as a process. The first SIGTERM (Cloud Run's) or interrupt
// cancels its context: a graceful shutdown. A second one closes Hurry(ctx), so that
// running jobs are cancelled and released at once, and exits the process (status 130)
// if the command has not returned within HardStopAfter; a third exits at once. An error
// is printed after the command's name and exits with ExitCode: 2 for a usage error (an
// unknown flag, a value that does not parse), 1 for any other; -h exits 0.
func Main(name string, run Command) {
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	hurry := make(chan struct{})
	ctx, cancel := context.WithCancel(WithHurry(context.Background(), hurry))
	go func() {
		<-sigs
		cancel()
		<-sigs
		close(hurry)
		select {
		case <-sigs:
		case <-time.After(HardStopAfter):
		}
		fmt.Fprintln(os.Stderr, name+": stopped by a repeated signal before its shutdown finished")
		os.Exit(130)
	}()
	err := run(ctx, os.Args[1:], OSEnv(), os.Stdout, os.Stderr)
	cancel()
	if code := ExitCode(err); code != ExitOK {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(code)
	}
}

type hurryKey struct{}

// WithHurry returns a context whose Hurry channel is hurry.
func WithHurry(ctx context.Context, hurry <-chan struct{}) context.Context {
	return context.WithValue(ctx, hurryKey{}, hurry)
}

// Hurry returns a channel that is closed when the process is asked a second time to
// stop: a graceful shutdown then cuts its grace short (cancels running jobs, releasing
// their runs). It is nil (never closed) for a context without one.
func Hurry(ctx context.Context) <-chan struct{} {
	h, _ := ctx.Value(hurryKey{}).(<-chan struct{})
	return h
}
