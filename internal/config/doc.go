// Package config is the configuration machinery the runonce binaries share: flags that
// are also read from RUNONCE_* environment variables, the checks that refuse an unsafe
// configuration with a reason, and the hardened HTTP server both serve on.
//
// # Guarantees
//
// Every flag is also read from RUNONCE_ + its name in upper snake case (-max-body from
// RUNONCE_MAX_BODY); a flag given on the command line wins over its variable, and a
// variable that does not parse is an error naming the variable. -addr also honours PORT
// (Cloud Run) when neither the flag nor RUNONCE_ADDR is set. A value that does not parse
// says what the flag wants (a Go duration such as 336h, a whole number, …); a RUNONCE_*
// variable that names no flag is reported (Parsed.Unknown) with the variable it likely
// misspells (Parsed.Likely), since it would otherwise be silently ignored. -h prints a
// one-line description, every flag with its variable, and exits 0; a usage error (an
// unknown flag, a value that does not parse, a missing required setting: UsageError)
// exits 2, any other failure 1.
//
// Main stops a command gracefully on the first SIGTERM or interrupt and hurries it on the
// second (Hurry: running jobs are cancelled and released at once); the process never
// outlives a second signal by more than HardStopAfter.
//
// Serve drains in-flight requests on shutdown within a grace shorter than Cloud Run's
// 10 s, and never leaves work running after a response has been written.
package config
