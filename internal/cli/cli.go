// Package cli is the runonce command: the operators' API (pkg/client) from a terminal.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/api/idtoken"

	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
)

// Usage is the command's help.
const Usage = `runonce operates the runs of a runonce ingress.

Usage:
  runonce runs list [--status S] [--job J] [--namespace N] [--since 24h] [--page-size N] [--page-token T]
  runonce runs show RUN_ID [--payload]
  runonce runs retry|cancel|release RUN_ID --reason "why" [--attempt N]
  runonce completion bash

Every command takes:
  --url URL      the ingress (RUNONCE_URL)
  --token TOKEN  a bearer token (RUNONCE_TOKEN); default: a Google ID token for --audience from ADC
  --audience A   the ID token's audience (default: --url)
  --json         print the API's JSON instead of a table
`

// Env reads the environment.
type Env func(string) string

// globals are the flags every command takes.
type globals struct {
	url, token, audience string
	json                 bool
	// newTokenSource makes a token source for an audience (ADC); tests replace it.
	newTokenSource func(ctx context.Context, audience string) (client.TokenSource, error)
	now            func() time.Time
}

func (g *globals) declare(fs *flag.FlagSet, env Env) {
	fs.StringVar(&g.url, "url", env("RUNONCE_URL"), "the ingress's URL (RUNONCE_URL)")
	fs.StringVar(&g.token, "token", env("RUNONCE_TOKEN"), "bearer token (RUNONCE_TOKEN); default: a Google ID token from ADC")
	fs.StringVar(&g.audience, "audience", env("RUNONCE_AUDIENCE"), "the ID token's audience (default: --url)")
	fs.BoolVar(&g.json, "json", false, "print JSON")
}

func (g *globals) client(ctx context.Context) (*client.Client, error) {
	if g.url == "" {
		return nil, errors.New("no ingress URL: pass --url https://… or set RUNONCE_URL")
	}
	if _, err := url.ParseRequestURI(g.url); err != nil {
		return nil, fmt.Errorf("--url %q is not a URL: %v", g.url, err)
	}
	c := &client.Client{BaseURL: g.url}
	switch {
	case g.token != "":
		tok := g.token
		c.Token = func(context.Context) (string, error) { return tok, nil }
	case strings.HasPrefix(g.url, "http://127.0.0.1") || strings.HasPrefix(g.url, "http://localhost"):
		// A local ingress (-dev, -auth none) needs no token.
	default:
		aud := g.audience
		if aud == "" {
			aud = g.url
		}
		ts, err := g.newTokenSource(ctx, aud)
		if err != nil {
			return nil, fmt.Errorf("no Google ID token for audience %s from Application Default Credentials (%v): pass --token \"$(gcloud auth print-identity-token)\"", aud, err)
		}
		c.Token = ts
	}
	return c, nil
}

func adcTokenSource(ctx context.Context, audience string) (client.TokenSource, error) {
	ts, err := idtoken.NewTokenSource(ctx, audience)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (string, error) {
		t, err := ts.Token()
		if err != nil {
			return "", err
		}
		return t.AccessToken, nil
	}, nil
}

// Main runs the command and returns its exit code: 0, 1 for a failure, 2 for a usage
// error. Every failure prints one line to stderr saying what failed.
func Main(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) int {
	err := Run(ctx, args, env, stdout, stderr)
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "runonce: %v\n\n%s", err, Usage)
		return 2
	}
	fmt.Fprintf(stderr, "runonce: %v\n", err)
	return 1
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Run runs the command.
func Run(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) error {
	return run(ctx, args, env, stdout, stderr, &globals{newTokenSource: adcTokenSource, now: time.Now})
}

func run(ctx context.Context, args []string, env Env, stdout, stderr io.Writer, g *globals) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, Usage)
		return nil
	case "completion":
		if len(args) != 2 || args[1] != "bash" {
			return usagef("completion takes one shell: bash")
		}
		fmt.Fprint(stdout, bashCompletion)
		return nil
	case "runs":
	default:
		return usagef("unknown command %q", args[0])
	}
	if len(args) < 2 {
		return usagef("runs needs a subcommand: list, show, retry, cancel or release")
	}
	sub, rest := args[1], args[2:]
	fs := flag.NewFlagSet("runonce runs "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, Usage) }
	g.declare(fs, env)
	switch sub {
	case "list":
		return list(ctx, fs, rest, g, stdout, stderr)
	case "show":
		full := fs.Bool("payload", false, "show the payload too (operators only)")
		id, err := parseWithID(fs, rest)
		if err != nil {
			return err
		}
		return show(ctx, g, id, *full, stdout)
	case ingress.ActionRetry, ingress.ActionCancel, ingress.ActionRelease:
		reason := fs.String("reason", "", "why (required; kept in the run's history)")
		attempt := fs.Int64("attempt", 0, "act only if the run is still at this attempt")
		id, err := parseWithID(fs, rest)
		if err != nil {
			return err
		}
		if strings.TrimSpace(*reason) == "" {
			return usagef("runs %s needs --reason \"why\": it is kept in the run's history", sub)
		}
		return act(ctx, g, id, sub, &ingress.ActionRequest{Reason: *reason, Attempt: *attempt}, stdout)
	}
	return usagef("unknown subcommand runs %s: list, show, retry, cancel or release", sub)
}

// parseWithID parses flags before and after the one positional argument, the run ID.
func parseWithID(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", flagErr(err)
	}
	if fs.NArg() == 0 {
		return "", usagef("%s needs a run ID", fs.Name())
	}
	id := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", flagErr(err)
	}
	if fs.NArg() > 0 {
		return "", usagef("%s takes one run ID, got also %q", fs.Name(), fs.Args())
	}
	if !ledger.ValidRunID(id) {
		return "", usagef("run ID %q is not 64 lower-case hex digits", id)
	}
	return id, nil
}

func flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usagef("%v", err)
}

func list(ctx context.Context, fs *flag.FlagSet, args []string, g *globals, stdout, stderr io.Writer) error {
	status := fs.String("status", "", "queued, running, completed, failed or cancelled")
	job := fs.String("job", "", "the job")
	ns := fs.String("namespace", "", "the namespace")
	since := fs.String("since", "", "created within this long (a Go duration: 24h, 90m)")
	size := fs.Int("page-size", 0, "runs per page (default 50)")
	token := fs.String("page-token", "", "continue a listing (the token the previous page printed)")
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	if fs.NArg() > 0 {
		return usagef("runs list takes no arguments, got %q", fs.Args())
	}
	q := url.Values{}
	for k, v := range map[string]string{"status": *status, "job": *job, "namespace": *ns, "since": *since, "page_token": *token} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *size != 0 {
		q.Set("page_size", strconv.Itoa(*size))
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	res, err := c.List(ctx, q)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, res)
	}
	now := g.now()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN ID\tJOB\tSTATUS\tATTEMPT\tCREATED\tUPDATED\tLAST ERROR")
	for _, r := range res.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.RunID, r.Job, r.Status, r.Attempt, Ago(r.CreatedAt, now), Ago(r.UpdatedAt, now), oneLine(r.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Runs) == 0 {
		fmt.Fprintln(stderr, "no runs match")
	}
	if res.NextPageToken != "" {
		fmt.Fprintf(stderr, "more: --page-token %s\n", res.NextPageToken)
	}
	return nil
}

func show(ctx context.Context, g *globals, id string, full bool, stdout io.Writer) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	d, err := c.Get(ctx, id, full)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, d)
	}
	now := g.now()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	if d.LastError != "" && d.Status != ledger.StatusCompleted {
		row("error", oneLine(d.LastError, 200))
	}
	row("run", d.RunID)
	row("status", string(d.Status))
	row("job", d.Job)
	row("namespace", d.Namespace)
	row("key", d.Key)
	if !d.ScheduleTime.IsZero() {
		row("scheduled", stamp(d.ScheduleTime, now))
	}
	row("attempt", fmt.Sprintf("%d (%d made in this budget)", d.Attempt, d.AttemptsMade))
	row("created", stamp(d.CreatedAt, now))
	row("updated", stamp(d.UpdatedAt, now))
	if !d.FinishedAt.IsZero() {
		row("finished", stamp(d.FinishedAt, now))
	}
	if !d.Deadline.IsZero() {
		row("deadline", stamp(d.Deadline, now))
	}
	row("execution", d.Execution)
	if d.Payload != nil {
		p := d.Payload.Text
		if p == "" {
			p = "base64:" + d.Payload.Base64
		}
		if d.Payload.Truncated {
			p += fmt.Sprintf(" … (%d bytes in all)", d.Payload.Bytes)
		}
		row("payload", p)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Attempts) > 0 {
		fmt.Fprintln(stdout, "\nATTEMPTS")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tWORKER\tSTARTED\tENDED\tOUTCOME\tERROR")
		for _, a := range d.Attempts {
			ended, outcome := "—", "running"
			if !a.Ended.IsZero() {
				ended, outcome = Ago(a.Ended, now), string(a.Outcome)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, dash(a.Worker), Ago(a.Started, now), ended, outcome, oneLine(a.Error, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(d.Effects) > 0 {
		fmt.Fprintln(stdout, "\nEFFECTS")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATUS\tATTEMPT\tKEY\tREF")
		for _, e := range d.Effects {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Name, e.Status, e.Attempt, e.Key, dash(e.Ref))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(d.History) > 0 {
		fmt.Fprintln(stdout, "\nHISTORY")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, e := range d.History {
			who := e.Worker
			if e.Actor != "" {
				who = "by " + e.Actor
			}
			fmt.Fprintf(tw, "%s\t%s\tattempt %d\t%s\t%s\n", e.At.Format(time.RFC3339), e.Kind, e.Attempt, who, oneLine(e.Text, 80))
		}
		return tw.Flush()
	}
	return nil
}

func act(ctx context.Context, g *globals, id, action string, req *ingress.ActionRequest, stdout io.Writer) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	res, err := c.Act(ctx, id, action, req)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "run %s is %s\n", res.RunID, res.Status)
	if res.Republished != nil && *res.Republished {
		fmt.Fprintln(stdout, "republished: a worker picks it up")
	}
	if res.Warning != "" {
		fmt.Fprintf(stdout, "warning: %s\n", res.Warning)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Ago is t relative to now, for people: "3m ago", "in 40s", "2d ago".
func Ago(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	if d := now.Sub(t); d >= 0 {
		return round(d) + " ago"
	}
	return "in " + round(t.Sub(now))
}

func round(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func stamp(t, now time.Time) string { return t.Format(time.RFC3339) + " (" + Ago(t, now) + ")" }

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

const bashCompletion = `# bash completion for runonce: source <(runonce completion bash)
_runonce() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  case $COMP_CWORD in
    1) COMPREPLY=($(compgen -W "runs completion help" -- "$cur")) ;;
    2) [[ ${COMP_WORDS[1]} == runs ]] && COMPREPLY=($(compgen -W "list show retry cancel release" -- "$cur")) ;;
    *) case ${COMP_WORDS[COMP_CWORD-1]} in
         --status) COMPREPLY=($(compgen -W "queued running completed failed cancelled" -- "$cur")) ;;
         *) COMPREPLY=($(compgen -W "--url --token --audience --json --status --job --namespace --since --page-size --page-token --reason --attempt --payload" -- "$cur")) ;;
       esac ;;
  esac
}
complete -F _runonce runonce
`
