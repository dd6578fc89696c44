package config

import (
	"errors"
	"flag"
	"fmt"
)

// Exit codes of every runonce command: 0 for success (and -h), 1 for a failure, 2 for a
// usage error, as the flag package's ExitOnError and most Unix tools do.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError is a command line (or a RUNONCE_* variable) a command cannot run with: an
// unknown flag, a value that does not parse, a stray argument, a missing required
// setting. Commands exit ExitUsage for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message (%w wraps as fmt.Errorf does).
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// IsUsage reports whether err is (or wraps) a UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// ExitCode is the exit status of a command that returned err: ExitOK for nil and
// flag.ErrHelp (help was asked for and printed), ExitUsage for a UsageError, else
// ExitFailure.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case IsUsage(err):
		return ExitUsage
	}
	return ExitFailure
}
