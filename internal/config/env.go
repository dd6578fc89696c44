package config

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// EnvPrefix prefixes every flag's environment variable.
const EnvPrefix = "RUNONCE_"

// EnvName returns the environment variable of a flag: RUNONCE_ + the name in upper
// snake case.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// Parse parses args into fs, then sets every flag not given on the command line from
// its environment variable (looked up with getenv, e.g. os.Getenv). A flag named "addr"
// falls back to ":"+PORT when neither it nor RUNONCE_ADDR is set.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		env := EnvName(f.Name)
		v := getenv(env)
		if v == "" && f.Name == "addr" {
			if port := getenv("PORT"); port != "" {
				env, v = "PORT", ":"+port
			}
		}
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment variable %s=%q (for -%s): %w", env, v, f.Name, serr)
		}
	})
	return err
}

// Retention floors: a record must outlast every message that can still deliver its run.
const (
	// MessageRetention is Pub/Sub's default (and the subscriptions') message retention.
	MessageRetention = 7 * 24 * time.Hour
	// SchedulerRetryWindow bounds how long a scheduler keeps retrying one run.
	SchedulerRetryWindow = 24 * time.Hour
)

// MinRetention returns the shortest safe retention for a process whose longest lease (or
// pickup deadline) is longest: the subscription's message retention, plus the
// scheduler's retry window, plus that lease.
func MinRetention(longest time.Duration) time.Duration {
	return MessageRetention + SchedulerRetryWindow + longest
}

// CheckRetention refuses a retention shorter than MinRetention(longest), saying why.
func CheckRetention(retention, longest time.Duration) error {
	if min := MinRetention(longest); retention < min {
		return fmt.Errorf("-retention %s is too short: a record must outlast Pub/Sub's message retention (%s), "+
			"the scheduler's retry window (%s) and the longest lease or pickup deadline (%s), so that a late "+
			"delivery or retry still finds it and is deduplicated; use at least %s (the default is 336h)",
			retention, MessageRetention, SchedulerRetryWindow, longest, min)
	}
	return nil
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
