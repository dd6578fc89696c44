package deploy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/runonce/runonce/internal/cli"
	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
)

// docCommand is a runonce command a document shows: its arguments after "runonce", and
// where it is.
type docCommand struct {
	where string
	args  []string
}

// fence is a Markdown document's fenced code blocks: the info string and the text.
var fence = regexp.MustCompile("(?ms)^([ \t]*)```([a-z]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$")

// inlineCode is a code span (the fences taken out first).
var inlineCode = regexp.MustCompile("`([^`]+)`")

// runonceCommands returns the runonce commands of a Markdown document: the calls of
// runonce in its shell code blocks (sh, bash, console), wherever they stand in a
// command line (after a pipe, in "<( … )"), and the code spans that start with
// "runonce ". Shell words are left unexpanded, for the caller's environment.
func runonceCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var out []docCommand
	// parse finds the calls of runonce in src, which starts at line first of doc.
	parse := func(first int, src string) {
		f, err := syntax.NewParser().Parse(strings.NewReader(src), path)
		if err != nil {
			t.Errorf("%s:%d: the shell does not parse: %v\n%s", path, first, err, src)
			return
		}
		syntax.Walk(f, func(n syntax.Node) bool {
			call, ok := n.(*syntax.CallExpr)
			if !ok || len(call.Args) == 0 || call.Args[0].Lit() != "runonce" {
				return true
			}
			where := fmt.Sprintf("%s:%d", path, first+int(call.Pos().Line())-1)
			args, err := expand.Fields(&expand.Config{Env: docEnv}, call.Args[1:]...)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				return true
			}
			out = append(out, docCommand{where, args})
			return true
		})
	}
	line := func(offset int) int { return strings.Count(doc[:offset], "\n") + 1 }
	rest := []byte(doc)
	for _, m := range fence.FindAllStringSubmatchIndex(doc, -1) {
		indent, lang, body := doc[m[2]:m[3]], doc[m[4]:m[5]], doc[m[6]:m[7]]
		if slices.Contains([]string{"sh", "bash", "console"}, lang) {
			// A block in a list item is indented as deep as its fence: the shell sees
			// it without (a here-document's end marker, say).
			parse(line(m[6]), regexp.MustCompile("(?m)^"+indent).ReplaceAllString(body, ""))
		}
		for i := m[0]; i < m[1]; i++ { // no code span inside a block
			if rest[i] == '`' {
				rest[i] = ' '
			}
		}
	}
	for _, m := range inlineCode.FindAllSubmatchIndex(rest, -1) {
		if span := strings.Join(strings.Fields(doc[m[2]:m[3]]), " "); strings.HasPrefix(span, "runonce ") {
			parse(line(m[2]), span)
		}
	}
	return out
}

// docEnv gives the documents' shell variables a value; the ingress's URL is filled in
// where a command is run.
var docEnv = expand.ListEnviron("URL=$URL", "TOKEN=token", "RUNONCE_URL=$URL", "RUNONCE_TOKEN=token", "OPERATOR=operator@example.com")

// TestDocumentedCommandsExist: every runonce command that the runbook (deploy/README.md),
// the README and the guides in docs/ show exists: run as written against an ingress, with RUN_ID a run of
// it, none is refused as a usage error (exit 2: an unknown command, subcommand or flag,
// a missing argument). A refusal by the ingress (a 409 for a run in the wrong status)
// is fine: the command exists. The runbook acts on runs with the product's own
// actions, retry and release, never by publishing to Pub/Sub by hand.
func TestDocumentedCommandsExist(t *testing.T) {
	t.Parallel()
	srv := cliIngress(t)
	runbook := runonceCommands(t, "README.md")
	guides, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	all := runbook
	for _, doc := range append([]string{"../README.md"}, guides...) {
		all = append(all, runonceCommands(t, doc)...)
	}
	seen := map[string]bool{}
	for _, c := range runbook {
		if len(c.args) > 1 && c.args[0] == "runs" {
			seen[c.args[1]] = true
		}
	}
	for _, want := range []string{"list", "show", string(api.ActionRetry), string(api.ActionRelease)} {
		if !seen[want] {
			t.Errorf("the runbook shows no `runonce runs %s`", want)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(readme, []byte("gcloud pubsub topics publish")) {
		t.Error("deploy/README.md publishes to Pub/Sub by hand; use `runonce runs retry` or `release`")
	}
	for _, c := range all {
		id := srv.failedRun(t)
		args := make([]string, len(c.args))
		for i, a := range c.args {
			args[i] = strings.ReplaceAll(strings.ReplaceAll(a, "$URL", srv.url), "RUN_ID", id)
		}
		var stdout, stderr bytes.Buffer
		code := cli.Main(t.Context(), args, config.Env{"RUNONCE_URL": srv.url}, &stdout, &stderr)
		if code == 2 {
			t.Errorf("%s: runonce %s: exit 2, a usage error:\n%s", c.where, strings.Join(c.args, " "), stderr.String())
		}
	}
	if len(all) < 8 {
		t.Fatalf("found %d runonce commands in the runbook, the README and docs/; the parser lost some: %v", len(all), all)
	}
}

// testIngress is an ingress on an in-memory ledger and an in-process Pub/Sub, with
// authentication off and everyone an operator.
type testIngress struct {
	url string
	led *ledger.Ledger
}

func cliIngress(t *testing.T) *testIngress {
	t.Helper()
	ctx := context.Background()
	led := ledger.New(memory.New(nil), nil)
	ps, err := pubsubtest.NewInProcess(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	t.Cleanup(func() { pub.Close() })
	h, err := ingress.New(&ingress.Config{Ledger: led, Publisher: pub, Auth: auth.None{}, Operators: auth.None{}, AcceptAnyJob: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testIngress{url: srv.URL, led: led}
}

// failedRun posts a run and fails its first attempt.
func (s *testIngress) failedRun(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/jobs/daily-report", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := ledger.KeyedRunID("", "daily-report", req.Header.Get("Idempotency-Key"))
	res, err := s.led.Acquire(t.Context(), &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: ledger.PayloadHash([]byte("{}"))}, AttemptID: uuid.NewString()})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	if _, err := s.led.Fail(t.Context(), &ledger.FailParams{Fence: ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	return id
}
