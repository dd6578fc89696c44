package config

import (
	"flag"
	"fmt"
	"strings"
)

// NewFlagSet returns a flag set for a command whose -h prints summary (what the command
// is, in a line or two), every flag with its environment variable and default, and how
// the environment is read.
func NewFlagSet(name, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() { PrintUsage(fs, summary) }
	return fs
}

// PrintUsage writes the usage of fs to its output.
func PrintUsage(fs *flag.FlagSet, summary string) {
	w := fs.Output()
	fmt.Fprintf(w, "%s: %s\n\nUsage: %s [flags]\n\nFlags (each also read from its environment variable; a flag given here wins):\n\n", fs.Name(), summary, fs.Name())
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if h, ok := f.Value.(hinted); ok {
			typ, usage = flag.UnquoteUsage(&flag.Flag{Name: f.Name, Usage: f.Usage, Value: h.Value})
		}
		head := "  -" + f.Name
		if typ != "" {
			head += " " + typ
		}
		fmt.Fprintf(w, "%-34s %s\n", head, EnvName(f.Name))
		usage = strings.ReplaceAll(usage, "\n", "\n      ")
		if f.DefValue != "" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "      %s\n", usage)
	})
	fmt.Fprintf(w, "\nEvery flag is also read from RUNONCE_ + its name in upper snake case (-max-body from RUNONCE_MAX_BODY)")
	if fs.Lookup("addr") != nil {
		fmt.Fprintf(w, ";\n-addr also from PORT (Cloud Run) when neither is set")
	}
	fmt.Fprintf(w, ". Durations use Go syntax (90s, 30m, 336h; no days).\nA RUNONCE_* variable that names no flag is reported at start.\n")
}
