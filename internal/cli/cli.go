// Package cli is the runonce command: the operators' API (pkg/client) from a terminal.
// Its commands are in commands.go; `runonce COMMAND --help` describes each.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/api/idtoken"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ledger"
)

// The environment variables of the global flags.
const (
	EnvURL      = "RUNONCE_URL"
	EnvToken    = "RUNONCE_TOKEN"
	EnvAudience = "RUNONCE_AUDIENCE"
)

// globals are the flags every command takes.
type globals struct {
	url, token, audience string
	json                 bool
	env                  config.Env
	// newTokenSource makes a token source for an audience (ADC); tests replace it.
	newTokenSource func(ctx context.Context, audience string) (client.TokenSource, error)
	now            func() time.Time
}

// declare declares the global flags on root. Their variables are read after parsing
// (fromEnv), not as defaults, so that --help never prints a token.
func (g *globals) declare(root *cobra.Command) {
	fs := root.PersistentFlags()
	fs.StringVar(&g.url, "url", "", "the ingress's URL, https://… or http://127.0.0.1:8080 ("+EnvURL+")")
	fs.StringVar(&g.token, "token", "", "bearer token ("+EnvToken+"); default: a Google ID token for --audience from Application Default Credentials")
	fs.StringVar(&g.audience, "audience", "", "the ID token's audience ("+EnvAudience+"; default: --url)")
	fs.BoolVar(&g.json, "json", false, "print the API's JSON instead of a table")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if c.Name() != cobra.ShellCompRequestCmd {
			warnMisspelt(c.ErrOrStderr(), g.env)
		}
		g.fromEnv(c)
		return nil
	}
}

// fromEnv sets each global flag not given on the command line from its variable.
func (g *globals) fromEnv(c *cobra.Command) {
	for name, v := range map[string]*string{"url": &g.url, "token": &g.token, "audience": &g.audience} {
		if !c.Flags().Changed(name) {
			*v = g.env.Get(config.EnvName(name))
		}
	}
}

// warnMisspelt warns about each RUNONCE_* variable of env that likely misspells one of
// the command's. Other RUNONCE_* variables are the ingress's and the worker's, often set
// in the same shell: not the command's business.
func warnMisspelt(w io.Writer, env config.Env) {
	known := []string{EnvURL, EnvToken, EnvAudience}
	var names []string
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !strings.HasPrefix(k, config.EnvPrefix) || slices.Contains(known, k) {
			continue
		}
		if l := config.LikelyVariable(k, known); l != "" {
			fmt.Fprintf(w, "runonce: warning: %s is ignored: no setting of runonce has that name (did you mean %s?)\n", k, l)
		}
	}
}

// isLocal reports whether host is this machine: a local ingress (-dev, -auth none)
// needs no token, and is served over plain http.
func isLocal(host string) bool {
	h := host
	if hh, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		h = hh
	}
	return h == "127.0.0.1" || h == "localhost" || strings.HasPrefix(host, "[::1]")
}

// checkURL refuses a --url that is not an http:// or https:// URL, saying what to write
// instead: 127.0.0.1:8080 is parsed as a path or as a URL of scheme "127.0.0.1".
func checkURL(raw string) error {
	if raw == "" {
		return usagef("no ingress URL: pass --url https://… (or http://127.0.0.1:8080 for -dev) or set %s", EnvURL)
	}
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	scheme := "https://"
	if host, _, _ := strings.Cut(raw, "/"); isLocal(host) {
		scheme = "http://"
	}
	if !strings.Contains(raw, "://") {
		return usagef("--url %q has no scheme: did you mean --url %s%s?", raw, scheme, raw)
	}
	return usagef("--url %q is not an http:// or https:// URL with a host, e.g. %sHOST", raw, scheme)
}

// tokenHint says how to get a token the ingress accepts: a Google ID token of an
// account it allows, for its audience, with the email it checks. A user account
// cannot mint one with that audience, so it impersonates the operator account
// (deploy/README.md, step 6).
func tokenHint(audience string) string {
	return fmt.Sprintf("pass --token \"$(gcloud auth print-identity-token --impersonate-service-account=OPERATOR_SA "+
		"--audiences=%s --include-email)\", OPERATOR_SA being a service account the ingress allows (its -operators or "+
		"-allow) on which you have roles/iam.serviceAccountTokenCreator (deploy/README.md, step 6)", audience)
}

func (g *globals) client(ctx context.Context) (*client.Client, error) {
	if err := checkURL(g.url); err != nil {
		return nil, err
	}
	u, _ := url.Parse(g.url)
	c := &client.Client{BaseURL: g.url}
	switch {
	case g.token != "":
		tok := g.token
		c.Token = func(context.Context) (string, error) { return tok, nil }
	case u.Scheme == "http" && isLocal(u.Host):
		// A local ingress (-dev, -auth none) needs no token.
	default:
		aud := g.audience
		if aud == "" {
			aud = g.url
		}
		ts, err := g.newTokenSource(ctx, aud)
		if err != nil {
			return nil, fmt.Errorf("no Google ID token for audience %s from Application Default Credentials (%v): %s", aud, err, tokenHint(aud))
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
// error (config.ExitCode). Every failure prints one line to stderr saying what failed;
// a usage error adds how to get the command's help.
func Main(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) int {
	c, err := run(ctx, args, env, stdout, stderr, &globals{newTokenSource: adcTokenSource, now: time.Now})
	code := config.ExitCode(err)
	switch code {
	case config.ExitUsage:
		fmt.Fprintf(stderr, "runonce: %v\nRun '%s --help' for usage.\n", err, c.CommandPath())
	case config.ExitFailure:
		fmt.Fprintf(stderr, "runonce: %v\n", err)
	}
	return code
}

// Run runs the command: nil, a config.UsageError for a usage error, or what failed.
func Run(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	_, err := run(ctx, args, env, stdout, stderr, &globals{newTokenSource: adcTokenSource, now: time.Now})
	return err
}

// run runs the command and returns the command it ran (or refused) with its error.
func run(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer, g *globals) (*cobra.Command, error) {
	g.env = env
	root := newRoot(g)
	root.SetArgs(oneDash(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	c, err := root.ExecuteContextC(ctx)
	if c == nil {
		c = root
	}
	return c, err
}

// usagef returns a usage error (exit 2).
func usagef(format string, args ...any) error { return config.Usagef(format, args...) }

type listFlags struct {
	status, job, namespace, since, pageToken string
	pageSize                                 int
}

func list(ctx context.Context, g *globals, f *listFlags, stdout, stderr io.Writer) error {
	o := &client.ListOptions{Status: ledger.Status(f.status), Job: f.job, Namespace: f.namespace, PageSize: f.pageSize, PageToken: f.pageToken}
	if f.since != "" {
		d, err := time.ParseDuration(f.since)
		if err != nil || d <= 0 {
			return usagef("--since %q: not a positive Go duration (24h, 90m)", f.since)
		}
		o.Since = d
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	res, err := c.List(ctx, o)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, res)
	}
	now := g.now()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN ID\tJOB\tKEY\tSTATUS\tATTEMPT\tCREATED\tUPDATED\tERROR")
	for _, r := range res.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", ShortID(r.RunID), r.Job, oneLine(runKey(r), 48), r.Status, r.Attempt, Ago(r.CreatedAt, now), Ago(r.UpdatedAt, now), oneLine(r.StatusError(), 60))
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

// ShortID is the part of a run ID a table shows: its first 12 digits, which name it in
// `runs show` and the dashboard's URLs.
func ShortID(id string) string { return id[:min(12, len(id))] }

// runKey is what identifies a run to its caller: the scheduler's job name and schedule
// time, or the Idempotency-Key (or job_key).
func runKey(r *api.RunJSON) string {
	if !r.ScheduleTime.IsZero() {
		return r.Key + " @ " + r.ScheduleTime.UTC().Format(time.RFC3339)
	}
	return r.Key
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
	// The error first, where it explains the status; an earlier attempt's is in
	// ATTEMPTS and HISTORY.
	row("error", oneLine(d.StatusError(), 200))
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
	if len(d.Result) > 0 {
		row("result", compactJSON(d.Result, 200))
	}
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
		uncertain := false
		for _, e := range d.Effects {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Name, e.Status, e.Attempt, e.Key, dash(e.Ref))
			uncertain = uncertain || e.Status == ledger.EffectPending
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if uncertain && d.Status == ledger.StatusFailed {
			fmt.Fprintf(stdout, "a pending effect may or may not have happened; once you know, settle it (the run is then retried):\n"+
				"  runonce runs resolve %s --effect NAME --done --ref REF --reason \"…\"   # it happened\n"+
				"  runonce runs resolve %s --effect NAME --not-done --reason \"…\"          # it did not: do it again\n", ShortID(d.RunID), ShortID(d.RunID))
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

// resolve returns the full ID of the run id names: id itself, or the run GET
// /v1/runs/{prefix} answers (an action needs the full ID).
func resolve(ctx context.Context, c *client.Client, id string) (string, error) {
	if ledger.ValidRunID(id) {
		return id, nil
	}
	d, err := c.Get(ctx, id, false)
	if err != nil {
		return "", err
	}
	return d.RunID, nil
}

func act(ctx context.Context, g *globals, id string, action api.Action, req *api.ActionRequest, stdout io.Writer) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	if id, err = resolve(ctx, c, id); err != nil {
		return err
	}
	res, err := c.Act(ctx, id, action, req)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, res)
	}
	printAction(stdout, res)
	return nil
}

// resolveEffect sends an effect's resolution (runs resolve).
func resolveEffect(ctx context.Context, g *globals, id string, req *api.ResolveRequest, stdout io.Writer) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	if id, err = resolve(ctx, c, id); err != nil {
		return err
	}
	res, err := c.Resolve(ctx, id, req)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(stdout, res)
	}
	switch {
	case req.Outcome == api.OutcomeNotDone:
		fmt.Fprintf(stdout, "effect %s: did not happen; the next attempt does it under the same key\n", req.Effect)
	case req.Ref != "":
		fmt.Fprintf(stdout, "effect %s: happened (%s); the next attempt skips it\n", req.Effect, req.Ref)
	default:
		fmt.Fprintf(stdout, "effect %s: happened; the next attempt skips it\n", req.Effect)
	}
	printAction(stdout, res)
	return nil
}

// printAction prints an action's answer: the run's status, and whether it was
// republished.
func printAction(stdout io.Writer, res *api.ActionJSON) {
	fmt.Fprintf(stdout, "run %s is %s\n", res.RunID, res.Status)
	if res.Republished != nil && *res.Republished {
		fmt.Fprintln(stdout, "republished: a worker picks it up")
	}
	if res.Warning != "" {
		fmt.Fprintf(stdout, "warning: %s\n", res.Warning)
	}
}

// compactJSON is a stored JSON value (a run's result) on one line of at most n runes;
// --json shows it whole.
func compactJSON(raw json.RawMessage, n int) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return oneLine(string(raw), n)
	}
	s := buf.String()
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + fmt.Sprintf("… (%d bytes; --json shows it whole)", len(s))
	}
	return s
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
