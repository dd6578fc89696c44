package config

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
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

// Env is a process environment: variable names to values.
type Env map[string]string

// OSEnv returns the process's environment.
func OSEnv() Env {
	env := Env{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Get returns the value of the variable k, or "".
func (e Env) Get(k string) string { return e[k] }

// Parsed says where the parsed settings came from.
type Parsed struct {
	// Unknown lists the RUNONCE_* variables of the environment that name no flag of the
	// flag set, sorted: a misspelt variable is ignored, so the command warns about it.
	Unknown []string
	// Likely maps each variable of Unknown that is close to the variable of a flag to
	// that variable: the one it likely misspells (RUNONCE_LEDGR: RUNONCE_LEDGER).
	Likely map[string]string
	source map[string]string
}

// UnknownList returns Unknown as a warning lists it: each variable with the one it
// likely misspells, "RUNONCE_LEDGR (did you mean RUNONCE_LEDGER?)".
func (p *Parsed) UnknownList() []string {
	out := make([]string, 0, len(p.Unknown))
	for _, k := range p.Unknown {
		out = append(out, DescribeUnknown(k, p.Likely[k]))
	}
	return out
}

// DescribeUnknown is how a warning names an unknown variable and the one it likely
// misspells ("" for none).
func DescribeUnknown(name, likely string) string {
	if likely == "" {
		return name
	}
	return name + " (did you mean " + likely + "?)"
}

// LikelyVariable returns the variable of known (names of RUNONCE_* variables) that
// name, a RUNONCE_* variable that is not one of them, likely misspells, or "" when none
// is close (see Closest; the prefix is not compared).
func LikelyVariable(name string, known []string) string {
	stems := make([]string, len(known))
	for i, k := range known {
		stems[i] = strings.TrimPrefix(k, EnvPrefix)
	}
	if c := Closest(strings.TrimPrefix(name, EnvPrefix), stems); c != "" {
		return EnvPrefix + c
	}
	return ""
}

// Source returns where flag name's value came from: "-name" (the command line), the
// environment variable that set it (RUNONCE_NAME, or PORT for -addr), or "" (its
// default).
func (p *Parsed) Source(name string) string { return p.source[name] }

// Parse parses args into fs, then sets every flag not given on the command line from
// its environment variable in env. A flag named "addr" falls back to ":"+PORT when
// neither it nor RUNONCE_ADDR is set. A value that does not parse, an unknown flag and a
// stray argument are a UsageError naming the flag (or the variable) and what it wants;
// -h prints the usage of fs (see NewFlagSet) and returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string, env Env) (*Parsed, error) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(hinted); !ok {
			f.Value = hinted{f.Value}
		}
	})
	out := fs.Output()
	fs.SetOutput(discard{})
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return nil, err
	case err != nil:
		return nil, Usagef("%w (%s -h lists the flags)", err, fs.Name())
	case fs.NArg() > 0:
		return nil, Usagef("unexpected arguments %q: every setting is a flag (%s -h lists them)", fs.Args(), fs.Name())
	}
	p := &Parsed{source: map[string]string{}}
	fs.Visit(func(f *flag.Flag) { p.source[f.Name] = "-" + f.Name })
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		known[EnvName(f.Name)] = true
		if err != nil || p.source[f.Name] != "" {
			return
		}
		name := EnvName(f.Name)
		v := env[name]
		if v == "" && f.Name == "addr" {
			if port := env["PORT"]; port != "" {
				name, v = "PORT", ":"+port
			}
		}
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = Usagef("environment variable %s=%q (for -%s): %w", name, v, f.Name, serr)
			return
		}
		p.source[f.Name] = name
	})
	if err != nil {
		return nil, err
	}
	for k := range env {
		if strings.HasPrefix(k, EnvPrefix) && !known[k] {
			p.Unknown = append(p.Unknown, k)
		}
	}
	sort.Strings(p.Unknown)
	knownNames := slices.Sorted(maps.Keys(known))
	for _, k := range p.Unknown {
		if l := LikelyVariable(k, knownNames); l != "" {
			if p.Likely == nil {
				p.Likely = map[string]string{}
			}
			p.Likely[k] = l
		}
	}
	return p, nil
}

// UnknownWarning is the message a command logs for Parsed.Unknown.
func UnknownWarning(command string) string {
	return "these RUNONCE_* environment variables name no flag of " + command + " and are ignored (misspelt? " + command + " -h lists the flags)"
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// hinted wraps a flag's value so that a value that does not parse says what is wanted.
type hinted struct{ flag.Value }

func (h hinted) Set(s string) error {
	if err := h.Value.Set(s); err != nil {
		if want := wanted(h.Value); want != "" {
			return fmt.Errorf("want %s", want)
		}
		return err
	}
	return nil
}

// IsBoolFlag lets a wrapped bool flag be given without a value.
func (h hinted) IsBoolFlag() bool {
	b, ok := h.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get returns the wrapped value's value.
func (h hinted) Get() any {
	if g, ok := h.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// wanted describes the values a flag takes, by its type.
func wanted(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a Go duration such as 90s, 30m or 336h (no days: write 14 days as 336h)"
	case bool:
		return "true or false"
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number, not negative"
	case float64:
		return "a number"
	}
	return ""
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
