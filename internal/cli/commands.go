package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/ledger"
)

// The command tree (github.com/spf13/cobra). Each command is a *cobra.Command with its
// Use, Short, Long and Example: its --help (and `runonce help …`) prints them with its
// flags and the global ones, and the shell completions name it. A new command is a
// function like listCmd that returns one, added to its parent in newRoot, runsCmd or
// jobsCmd (jobs.go);
// its RunE returns usagef(…) for a usage error (exit 2) and any other error for a
// failure (exit 1), and its Args is exactArgs, noArgs or a function of the same kind,
// never cobra's own (whose errors would exit 1).

// usageTemplate is cobra's usage, shorter: the command's use line (or COMMAND for a
// command that only groups others), its subcommands, its flags and the global ones.
const usageTemplate = `Usage:{{if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND{{else}}
  {{.UseLine}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Run '{{.CommandPath}} COMMAND --help' for a command's flags.{{end}}
`

// newRoot returns the runonce command.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "runonce",
		Short: "operate the runs of a runonce ingress",
		Long: `runonce operates the runs of a runonce ingress: list and show runs, retry, cancel and
release them, and resolve the effects a failed run left uncertain (the operators' API,
GET /v1/runs and POST /v1/runs/RUN_ID:ACTION); audit a job's ticks, backfill the missed
ones and start a run by hand (GET /v1/jobs/JOB/ticks, POST /v1/jobs/JOB:backfill and
:run).

Every command takes --url (RUNONCE_URL), --token (RUNONCE_TOKEN) or else a Google ID
token for --audience (RUNONCE_AUDIENCE, default --url) from Application Default
Credentials; a local ingress (http://127.0.0.1…, http://localhost…) needs none.
It exits 0 on success, 1 when the command failed, 2 on a usage error.`,
		Args:          subcommandArgs,
		RunE:          needsSubcommand,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No default completion command: ours (completionCmd) refuses an unknown shell.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usagef("%v", err) })
	g.declare(root)
	root.AddCommand(runsCmd(g), jobsCmd(g), completionCmd(root))
	return root
}

func runsCmd(g *globals) *cobra.Command {
	runs := &cobra.Command{
		Use:   "runs",
		Short: "list, show, retry, cancel, release or resolve runs",
		Long: `runs list, shows, retries, cancels, releases and resolves runs. A RUN_ID is the run's 64
hex digits or a prefix of at least ` + fmt.Sprint(ledger.MinRunIDPrefix) + ` of them that names one run (the tables show 12).`,
		Args: subcommandArgs,
		RunE: needsSubcommand,
	}
	runs.AddCommand(listCmd(g), showCmd(g))
	for _, a := range []struct {
		name        api.Action
		short, long string
	}{
		{api.ActionRetry, "queue a failed run again with a fresh attempt budget",
			"retry returns a failed run to queued with a fresh attempt budget and republishes it; the effects it did stay done."},
		{api.ActionCancel, "cancel a queued or running run",
			"cancel makes a queued or running run cancelled: it never runs again, and a running attempt stops at its next lease renewal."},
		{api.ActionRelease, "end the lease of a running run whose worker is gone",
			"release ends the lease of a running run whose worker is gone, now: the run is queued again and republished, and the old holder can no longer write."},
	} {
		runs.AddCommand(actionCmd(g, a.name, a.short, a.long))
	}
	runs.AddCommand(resolveCmd(g))
	return runs
}

func listCmd(g *globals) *cobra.Command {
	var f listFlags
	c := &cobra.Command{
		Use:   "list [flags]",
		Short: "list runs, newest first",
		Long:  "list lists runs, newest first, one page at a time: ID (12 digits), job, key, status, attempt, times and the last error.",
		Example: `  runonce runs list --status failed --job send-invoices --since 24h
  runonce runs list --json | jq -r '.runs[].run_id'`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return list(c.Context(), g, &f, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.status, "status", "", "queued, running, completed, failed or cancelled")
	fs.StringVar(&f.job, "job", "", "the job")
	fs.StringVar(&f.namespace, "namespace", "", "the namespace")
	fs.StringVar(&f.since, "since", "", "created within this long (a Go duration: 24h, 90m)")
	fs.IntVar(&f.pageSize, "page-size", 0, "runs per page (default 50, at most 200)")
	fs.StringVar(&f.pageToken, "page-token", "", "continue a listing (the token the previous page printed)")
	_ = c.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(statusNames(), cobra.ShellCompDirectiveNoFileComp))
	return c
}

func showCmd(g *globals) *cobra.Command {
	var payload bool
	c := &cobra.Command{
		Use:   "show RUN_ID [flags]",
		Short: "show a run: its status, error, attempts, effects and history",
		Long: `show shows a run: the error that explains its status first, then its record, its
attempts, its effects and its history. RUN_ID may be a prefix of at least ` + fmt.Sprint(ledger.MinRunIDPrefix) + ` hex digits.`,
		Example: "  runonce runs show 3f2a9c41d0e7\n  runonce runs show 3f2a9c41d0e7 --payload --json",
		Args:    exactArgs("a run ID"),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			return show(c.Context(), g, id, payload, c.OutOrStdout())
		},
	}
	c.Flags().BoolVar(&payload, "payload", false, "show the payload too (operators only)")
	return c
}

func actionCmd(g *globals, action api.Action, short, long string) *cobra.Command {
	var req api.ActionRequest
	c := &cobra.Command{
		Use:     string(action) + ` RUN_ID --reason "why" [flags]`,
		Short:   short,
		Long:    long + "\nThe reason is kept in the run's history with who acted. RUN_ID may be a prefix of at least " + fmt.Sprint(ledger.MinRunIDPrefix) + " hex digits.",
		Example: fmt.Sprintf("  runonce runs %s 3f2a9c41d0e7 --reason \"the SMTP relay is back\"", action),
		Args:    exactArgs("a run ID"),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			if strings.TrimSpace(req.Reason) == "" {
				return usagef("runs %s needs --reason \"why\": it is kept in the run's history", action)
			}
			return act(c.Context(), g, id, action, &req, c.OutOrStdout())
		},
	}
	c.Flags().StringVar(&req.Reason, "reason", "", "why (required; kept in the run's history)")
	c.Flags().Int64Var(&req.Attempt, "attempt", 0, "act only if the run is still at this attempt (the one you looked at)")
	return c
}

// resolveCmd is runs resolve: an operator's verdict on an effect a failed run left
// uncertain.
func resolveCmd(g *globals) *cobra.Command {
	var (
		req           api.ResolveRequest
		done, notDone bool
	)
	c := &cobra.Command{
		Use:   `resolve RUN_ID --effect NAME (--done --ref REF | --not-done) --reason "why" [flags]`,
		Short: "say whether an effect a failed run left uncertain happened",
		Long: `resolve settles an effect a failed run began and never recorded the end of (a start whose
answer was lost, an AtMostOnce effect cut short): it may or may not have happened, and a
retry alone leaves it so. Once you know, say which: --done (it happened; --ref names what
it made: for a Google Cloud API target's start, the execution, which the next attempt
then follows; a start marked done without one counts as refused) or --not-done (it did
not: the next attempt does it under the same key). The run is then queued again with a
fresh attempt budget and republished. runs show lists the run's effects; the pending ones
of a failed run are the uncertain ones. RUN_ID may be a prefix of at least ` + fmt.Sprint(ledger.MinRunIDPrefix) + ` hex digits.`,
		Example: `  runonce runs resolve 3f2a9c41d0e7 --effect run --done --ref projects/P/locations/L/workflows/W/executions/E --reason "found it by its key"
  runonce runs resolve 3f2a9c41d0e7 --effect run/2 --not-done --reason "no execution carries the key"`,
		Args: exactArgs("a run ID"),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			switch {
			case strings.TrimSpace(req.Effect) == "":
				return usagef("runs resolve needs --effect NAME: runs show %s lists the run's effects", args[0])
			case done == notDone:
				return usagef("runs resolve needs exactly one of --done (it happened) and --not-done (it did not)")
			case req.Ref != "" && notDone:
				return usagef("--ref names what the effect made: give it only with --done")
			case strings.TrimSpace(req.Reason) == "":
				return usagef("runs resolve needs --reason \"why\": it is kept in the run's history")
			case done && strings.TrimSpace(req.Ref) == "":
				return usagef("runs resolve --done needs --ref: what the effect made (a start: the execution's full name, which the next attempt follows)")
			}
			req.Outcome = api.OutcomeNotDone
			if done {
				req.Outcome = api.OutcomeDone
			}
			return resolveEffect(c.Context(), g, id, &req, c.OutOrStdout())
		},
	}
	fs := c.Flags()
	fs.StringVar(&req.Effect, "effect", "", "the effect, as runs show lists it (a target's start: run, run/2, …)")
	fs.BoolVar(&done, "done", false, "it happened (a start: the execution exists; --ref names it)")
	fs.BoolVar(&notDone, "not-done", false, "it did not happen: the next attempt does it under the same key")
	fs.StringVar(&req.Ref, "ref", "", "with --done (required): what the effect made (a start: the execution's full name)")
	fs.StringVar(&req.Reason, "reason", "", "why (required; kept in the run's history)")
	fs.Int64Var(&req.Attempt, "attempt", 0, "act only if the run is still at this attempt (the one you looked at)")
	return c
}

// subcommands are the names of c's subcommands.
func subcommands(c *cobra.Command) []string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}

// needsSubcommand is the RunE of a command that only groups others.
func needsSubcommand(c *cobra.Command, _ []string) error {
	if !c.HasParent() {
		return usagef("no command: %s", strings.Join(subcommands(c), ", "))
	}
	return usagef("%s needs a command: %s", commandName(c), strings.Join(subcommands(c), ", "))
}

// subcommandArgs refuses an argument that names no subcommand of c, suggesting the
// likely one.
func subcommandArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	names := subcommands(c)
	hint := ""
	if l := config.Closest(args[0], names); l != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", l)
	}
	return usagef("unknown command %q for %q%s: %s", args[0], c.CommandPath(), hint, strings.Join(names, ", "))
}

// exactArgs accepts one positional argument, what.
func exactArgs(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usagef("%s needs %s", commandName(c), what)
		case len(args) > 1:
			return usagef("%s takes %s, got also %q", commandName(c), what, args[1:])
		}
		return nil
	}
}

func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", commandName(c), args)
	}
	return nil
}

// commandName is c's path without the program's name ("runs show").
func commandName(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// parseRunID checks a RUN_ID argument: 64 hex digits, or a prefix of at least
// ledger.MinRunIDPrefix.
func parseRunID(s string) (string, error) {
	if ledger.ValidRunID(s) {
		return s, nil
	}
	if ledger.ValidRunIDPrefix(s) != nil {
		return "", usagef("run ID %q is neither 64 lower-case hex digits nor a prefix of at least %d of them (the tables show 12)", s, ledger.MinRunIDPrefix)
	}
	return s, nil
}

func statusNames() []string {
	out := make([]string, 0, len(ledger.Statuses()))
	for _, s := range ledger.Statuses() {
		out = append(out, string(s))
	}
	return out
}

// longFlags are the names of every long flag of c and its subcommands.
func longFlags(c *cobra.Command) []string {
	var out []string
	add := func(f *pflag.Flag) { out = append(out, f.Name) }
	c.LocalFlags().VisitAll(add)
	c.PersistentFlags().VisitAll(add)
	for _, s := range c.Commands() {
		out = append(out, longFlags(s)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// oneDash lets a long flag be given with one dash, as the flag package (and so the
// ingress and the worker) takes it: -json is --json. Arguments after "--", and those
// that name no long flag, are left alone.
func oneDash(root *cobra.Command, args []string) []string {
	names := longFlags(root)
	names = append(names, "help")
	slices.Sort(names)
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if _, found := slices.BinarySearch(names, name); found {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
