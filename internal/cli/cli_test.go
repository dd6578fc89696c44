package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
)

// server is an ingress on a SQLite ledger and an in-process Pub/Sub.
type server struct {
	url   string
	led   *ledger.Ledger
	authz atomic.Value // the last Authorization header
}

func newServer(t *testing.T) *server {
	t.Helper()
	ctx := context.Background()
	drv, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "runonce.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.New(drv, nil)
	t.Cleanup(func() { led.Close() })
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
	h, err := ingress.New(&ingress.Config{Ledger: led, Publisher: pub, Namespace: "ns", Auth: auth.None{}, Operators: auth.None{}, AcceptAnyJob: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{led: led}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.authz.Store(r.Header.Get("Authorization"))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// post claims a run of job with a fresh key and returns its ID.
func (s *server) post(t *testing.T, job string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/jobs/"+job, strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	return body["run_id"].(string)
}

// acquire starts the run's next attempt on worker host-b/9, as a worker's claim does.
func (s *server) acquire(t *testing.T, id string) ledger.Fence {
	t.Helper()
	res, err := s.led.Acquire(t.Context(), &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: ledger.PayloadHash([]byte("{}"))}, AttemptID: uuid.NewString(), Worker: "host-b/9"})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	return ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
}

// release releases the attempt f with msg, as a worker shutting down does.
func (s *server) release(t *testing.T, f ledger.Fence, msg string) {
	t.Helper()
	if _, err := s.led.Release(t.Context(), &ledger.ReleaseParams{Fence: f, Error: msg}); err != nil {
		t.Fatal(err)
	}
}

// failedRun claims a run of job and fails its first attempt with msg; the attempt
// began the effects named in effects and never marked them done.
func (s *server) failedRun(t *testing.T, job, msg string, effects ...string) string {
	t.Helper()
	id := s.post(t, job)
	f := s.acquire(t, id)
	for _, name := range effects {
		if _, err := s.led.BeginEffect(t.Context(), &ledger.BeginEffectParams{Fence: f, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.led.Fail(t.Context(), &ledger.FailParams{Fence: f, Error: msg}); err != nil {
		t.Fatal(err)
	}
	return id
}

// nextBegin claims run id as the next attempt and begins effect name.
func (s *server) nextBegin(t *testing.T, id, name string) *ledger.BeginEffectResult {
	t.Helper()
	ctx := t.Context()
	res, err := s.led.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: ledger.PayloadHash([]byte("{}"))}, AttemptID: uuid.NewString()})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	fx, err := s.led.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func TestResolveAnUncertainStartFromTheCLI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	id := s.failedRun(t, "nightly-report", "the start's answer was lost", "run", "run/2")

	r := runCLI(t, env, "runs", "show", id[:12])
	if r.code != 0 || !strings.Contains(r.stdout, "runonce runs resolve "+id[:12]+" --effect NAME --done") {
		t.Fatalf("runs show of a failed run with pending effects = %d\n%s%s; want the resolve commands", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "resolve", id[:12], "--effect", "run", "--done", "--ref", "executions/e-1", "--reason", "found it in the console")
	if r.code != 0 || !strings.Contains(r.stdout, "effect run: happened (executions/e-1)") || !strings.Contains(r.stdout, "run "+id+" is queued") ||
		!strings.Contains(r.stdout, "republished") {
		t.Fatalf("runs resolve --done = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	e, err := s.led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: id, Name: "run"})
	if err != nil || e.Status != ledger.EffectDone || e.Ref != "executions/e-1" {
		t.Fatalf("effect run after runs resolve --done = %+v, %v; want done with the ref", e, err)
	}
	r = runCLI(t, env, "runs", "resolve", id, "--effect", "run/2", "--not-done", "--reason", "late")
	if r.code != 1 || !strings.Contains(r.stderr, "409") || !strings.Contains(r.stderr, "only a failed run can be resolved") {
		t.Fatalf("runs resolve of a queued run = %d %q; want exit 1 naming the 409", r.code, r.stderr)
	}

	id = s.failedRun(t, "nightly-report", "the start's answer was lost", "run")
	r = runCLI(t, env, "runs", "resolve", "--not-done", id, "-effect", "run", "--reason", "no execution carries the key", "--json")
	var act api.ActionJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &act) != nil || act.Status != ledger.StatusQueued || act.Republished == nil || !*act.Republished {
		t.Fatalf("runs resolve --not-done --json = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if fx := s.nextBegin(t, id, "run"); fx.Done || fx.PreviousAttempt != 0 {
		t.Fatalf("the next attempt's BeginEffect = done %v, previous attempt %d; want a fresh start", fx.Done, fx.PreviousAttempt)
	}
	r = runCLI(t, env, "runs", "show", id, "--json")
	var d api.RunDetailJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil {
		t.Fatalf("runs show --json = %d\n%s", r.code, r.stdout)
	}
	if last := d.History[len(d.History)-2]; last.Kind != ledger.EventEffectResolved || !strings.Contains(last.Text, "no execution carries the key") {
		t.Fatalf("the history before the last start = %+v; want the resolution with its reason", last)
	}
}

// key returns the key of run id.
func (s *server) key(t *testing.T, id string) string {
	t.Helper()
	r, err := s.led.Get(t.Context(), &ledger.GetParams{RunID: id})
	if err != nil || r.Key == "" {
		t.Fatalf("Get(%s) = %v, %v; want a run with a key", id, r, err)
	}
	return r.Key
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(t.Context(), args, env, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func TestFindUnderstandRetryAndCancelFromTheCLI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	id := s.failedRun(t, "send-invoices", "smtp: 554 rejected")

	r := runCLI(t, env, "runs", "list", "--status", "failed", "--job", "send-invoices", "--since", "24h")
	key := s.key(t, id)
	if r.code != 0 || !strings.Contains(r.stdout, id[:12]+" ") || strings.Contains(r.stdout, id[:13]) || !strings.Contains(r.stdout, key) ||
		!strings.Contains(r.stdout, "smtp: 554 rejected") || !strings.HasPrefix(r.stdout, "RUN ID") || !strings.Contains(r.stdout, "KEY") {
		t.Fatalf("runs list = %d\n%s%s; want the run's 12-digit ID, its key and its error", r.code, r.stdout, r.stderr)
	}
	// One dash, as the ingress's and the worker's flags take them.
	if r := runCLI(t, env, "runs", "list", "-status", "failed", "-json"); r.code != 0 || !strings.Contains(r.stdout, `"run_id": "`+id+`"`) {
		t.Fatalf("runs list -status failed -json = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "list", "--status", "completed", "--json")
	var page api.ListJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Runs) != 0 {
		t.Fatalf("runs list --status completed --json = %d %q", r.code, r.stdout)
	}

	// The 12 digits the table shows name the run.
	r = runCLI(t, env, "runs", "show", id[:12])
	if r.code != 0 || !strings.HasPrefix(r.stdout, "error") || !strings.Contains(r.stdout, "ATTEMPTS") || !strings.Contains(r.stdout, "host-b/9") ||
		!strings.Contains(r.stdout, id) {
		t.Fatalf("runs show %s = %d\n%s%s; want the error first, the full ID and the attempts", id[:12], r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, env, "runs", "retry", id[:12], "--reason", "relay fixed")
	if r.code != 0 || !strings.Contains(r.stdout, "run "+id+" is queued") || !strings.Contains(r.stdout, "republished") {
		t.Fatalf("runs retry %s = %d\n%s%s", id[:12], r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "cancel", "--reason", "must not go out", id, "--json")
	var act api.ActionJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &act) != nil || act.Status != ledger.StatusCancelled {
		t.Fatalf("runs cancel --json = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "release", id, "--reason", "free it")
	if r.code != 1 || !strings.Contains(r.stderr, "409") || !strings.Contains(r.stderr, "only a running run can be released") {
		t.Fatalf("runs release of a cancelled run = %d %q; want exit 1 naming the 409", r.code, r.stderr)
	}
	r = runCLI(t, env, "runs", "show", id, "--json")
	var d api.RunDetailJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil || d.History[len(d.History)-1].Kind != ledger.EventCancelled {
		t.Fatalf("runs show --json = %d\n%s", r.code, r.stdout)
	}
}

// TestErrorShownWhereItExplainsTheStatus: the list and a run's page show the last error
// of a failed run and of a run queued again after an error, but not an earlier
// attempt's error of a run that completed since; that stays in its attempts.
func TestErrorShownWhereItExplainsTheStatus(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	const old, again = "worker: shutting down", "smtp: 421 try again later"
	completed := s.post(t, "report")
	s.release(t, s.acquire(t, completed), old)
	if _, err := s.led.Complete(t.Context(), &ledger.CompleteParams{Fence: s.acquire(t, completed)}); err != nil {
		t.Fatal(err)
	}
	queued := s.post(t, "mail")
	s.release(t, s.acquire(t, queued), again)
	failed := s.failedRun(t, "invoice", "smtp: 554 rejected")

	r := runCLI(t, env, "runs", "list")
	if r.code != 0 || strings.Contains(row(r.stdout, completed), old) || !strings.Contains(row(r.stdout, queued), again) || !strings.Contains(row(r.stdout, failed), "smtp: 554 rejected") {
		t.Fatalf("runs list = %d\n%s%s\nwant the errors of the queued and the failed runs, not the completed run's old one", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "show", completed)
	attempts := r.stdout[strings.Index(r.stdout, "ATTEMPTS"):]
	if r.code != 0 || strings.HasPrefix(r.stdout, "error") || !strings.Contains(attempts, old) {
		t.Fatalf("runs show of the completed run = %d\n%s%s\nwant no error line, the old error in its attempts", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "show", queued)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "error") || !strings.Contains(strings.SplitN(r.stdout, "\n", 2)[0], again) {
		t.Fatalf("runs show of the released run = %d\n%s%s\nwant its error first", r.code, r.stdout, r.stderr)
	}
}

// TestShowPrintsTheResult: runs show prints what a completed run left (worker.SetResult),
// on one line, cut when long.
func TestShowPrintsTheResult(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	short, long := s.post(t, "report"), s.post(t, "report")
	for id, res := range map[string]string{short: `{"greeting": "hello, once per run",
  "attempt": 1}`, long: `{"sent": "` + strings.Repeat("x", 500) + `"}`} {
		if _, err := s.led.Complete(t.Context(), &ledger.CompleteParams{Fence: s.acquire(t, id), Result: []byte(res)}); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, env, "runs", "show", short)
	if r.code != 0 || !strings.Contains(r.stdout, `result     {"greeting":"hello, once per run","attempt":1}`+"\n") {
		t.Fatalf("runs show = %d\n%s%s\nwant the result on one line", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "show", long)
	if r.code != 0 || !strings.Contains(r.stdout, "… (511 bytes; --json shows it whole)") {
		t.Fatalf("runs show of a long result = %d\n%s%s\nwant it cut, with its size", r.code, r.stdout, r.stderr)
	}
}

// TestListShowsTheKey: runs list shows what identifies each run to its caller, the
// Idempotency-Key or the scheduler's job name and schedule time.
func TestListShowsTheKey(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	post := func(hdr map[string]string) string {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/jobs/report", strings.NewReader("{}"))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST = %d %v %v", resp.StatusCode, body, err)
		}
		return body["run_id"].(string)
	}
	keyed := post(map[string]string{"Idempotency-Key": "daily-report:2026-11-01"})
	scheduled := post(map[string]string{"X-CloudScheduler-JobName": "nightly-report", "X-CloudScheduler-ScheduleTime": "2026-11-30T06:00:00+01:00"})
	r := runCLI(t, map[string]string{"RUNONCE_URL": s.url}, "runs", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "KEY") || !strings.Contains(row(r.stdout, keyed), "daily-report:2026-11-01") ||
		!strings.Contains(row(r.stdout, scheduled), "nightly-report @ 2026-11-30T05:00:00Z") {
		t.Fatalf("runs list = %d\n%s%s\nwant a KEY column with each run's key", r.code, r.stdout, r.stderr)
	}
}

// row returns the line of a table that shows the run id (its first 12 digits at least).
func row(table, id string) string {
	for l := range strings.Lines(table) {
		if strings.Contains(l, id[:12]) {
			return l
		}
	}
	return ""
}

func TestCLIErrorsSayWhatFailed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	id := strings.Repeat("a", 64)
	// Two runs whose IDs start alike.
	p := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	for _, rid := range []string{p + "1" + id[:51], p + "2" + id[:51]} {
		if _, err := s.led.Claim(t.Context(), &ledger.ClaimParams{Identity: ledger.Identity{RunID: rid, Job: "j"}, AttemptID: uuid.NewString()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{env, nil, 2, "no command: completion, jobs, runs"},
		{env, []string{"job"}, 2, `unknown command "job"`},
		{env, []string{"jobs"}, 2, "jobs needs a command: backfill, run, ticks"},
		{env, []string{"rusn", "list"}, 2, `did you mean "runs"?`},
		{env, []string{"runs"}, 2, "runs needs a command: cancel, list, release, resolve, retry, show"},
		{env, []string{"runs", "explode"}, 2, `unknown command "explode" for "runonce runs"`},
		{env, []string{"runs", "show"}, 2, "needs a run ID"},
		{env, []string{"runs", "show", "xyz"}, 2, "prefix of at least 6"},
		{env, []string{"runs", "show", "abcde"}, 2, "prefix of at least 6"},
		{env, []string{"runs", "show", id, id}, 2, "takes a run ID, got also"},
		{env, []string{"runs", "cancel", id}, 2, "--reason"},
		{env, []string{"runs", "resolve", id, "--done", "--reason", "r"}, 2, "--effect"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--reason", "r"}, 2, "exactly one of --done"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--done", "--not-done", "--reason", "r"}, 2, "exactly one of --done"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--not-done", "--ref", "e", "--reason", "r"}, 2, "only with --done"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--done"}, 2, "--reason"},
		{env, []string{"runs", "resolve", "--effect", "run", "--done", "--reason", "r"}, 2, "needs a run ID"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--done", "--reason", "r"}, 2, "--done needs --ref"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--done", "--ref", "e", "--reason", "r"}, 1, "404"},
		{env, []string{"runs", "resolve", id, "--effect", "run", "--done", "--ref", strings.Repeat("x", 1025), "--reason", "r"}, 1, "ref is 1025 bytes"},
		{env, []string{"runs", "list", "--colour", "red"}, 2, "unknown flag: --colour"},
		{env, []string{"runs", "list", "extra"}, 2, "takes no arguments"},
		{env, []string{"completion"}, 2, "needs a shell"},
		{env, []string{"completion", "tcsh"}, 2, `no shell "tcsh"`},
		{env, []string{"runs", "show", id}, 1, "404"},
		{env, []string{"runs", "show", id[:8]}, 1, "no run ID starts with " + id[:8]},
		{env, []string{"runs", "show", p}, 1, "409 Conflict: run ID prefix " + p + " names more than one run (" + p + "1"},
		{env, []string{"runs", "cancel", p, "--reason", "x"}, 1, "names more than one run"},
		{env, []string{"runs", "list", "--status", "lost"}, 1, "400"},
		{nil, []string{"runs", "list"}, 2, "no ingress URL: pass --url"},
		{env, []string{"runs", "list", "--url", "127.0.0.1:8080"}, 2, "did you mean --url http://127.0.0.1:8080?"},
		{env, []string{"runs", "list", "--url", "localhost:8080"}, 2, "did you mean --url http://localhost:8080?"},
		{env, []string{"runs", "list", "--url", "runonce.example.com"}, 2, "did you mean --url https://runonce.example.com?"},
		{map[string]string{"RUNONCE_URL": "http://127.0.0.1:1"}, []string{"runs", "list"}, 1, "connect"},
	} {
		r := runCLI(t, c.env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("runonce %v = %d %q; want %d naming %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		if strings.Contains(r.stderr, "runonce: runonce") || strings.Count(r.stderr, "runonce: ") != 1 {
			t.Errorf("runonce %v printed %q; want one line after one \"runonce: \"", c.args, r.stderr)
		}
		if c.code == 2 && !strings.Contains(r.stderr, "--help' for usage") {
			t.Errorf("runonce %v printed %q; want the way to the command's help", c.args, r.stderr)
		}
	}
}

// TestCLIHelp: every command has its own --help (exit 0, on stdout), naming its flags,
// the global ones and its subcommands; `runonce help COMMAND` says the same.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"runonce COMMAND", "runs", "completion", "--url", "RUNONCE_URL", "RUNONCE_TOKEN", "exits 0"}},
		{[]string{"-h"}, []string{"runonce COMMAND"}},
		{[]string{"help"}, []string{"runonce COMMAND"}},
		{[]string{"runs", "--help"}, []string{"runonce runs COMMAND", "list", "show", "retry", "cancel", "release", "resolve", "prefix of at least 6"}},
		{[]string{"runs", "list", "--help"}, []string{"runonce runs list [flags]", "--status", "--page-token", "Global flags:", "--url", "--json"}},
		{[]string{"runs", "list", "-help"}, []string{"runonce runs list [flags]"}},
		{[]string{"runs", "show", "--help"}, []string{"runonce runs show RUN_ID", "--payload"}},
		{[]string{"runs", "retry", "--help"}, []string{"runonce runs retry RUN_ID --reason", "--attempt", "fresh attempt budget"}},
		{[]string{"runs", "cancel", "--help"}, []string{"runonce runs cancel RUN_ID", "--reason"}},
		{[]string{"runs", "release", "--help"}, []string{"runonce runs release RUN_ID", "worker is gone"}},
		{[]string{"runs", "resolve", "--help"}, []string{"runonce runs resolve RUN_ID --effect NAME", "--not-done", "--ref", "may or may not have happened"}},
		{[]string{"help", "runs", "show"}, []string{"runonce runs show RUN_ID"}},
		{[]string{"completion", "--help"}, []string{"bash", "zsh", "fish", "source <(runonce completion bash)"}},
	} {
		r := runCLI(t, nil, c.args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("runonce %v = %d, stderr %q; want 0 and nothing on stderr", c.args, r.code, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("runonce %v does not say %q:\n%s", c.args, w, r.stdout)
			}
		}
	}
}

// TestCLICompletion: completion writes bash's, zsh's and fish's scripts, and the
// scripts' requests (cobra's __complete) complete commands, flags and --status's values.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash":       "complete -o default -F __start_runonce runonce",
		"zsh":        "#compdef runonce",
		"fish":       "complete -c runonce",
		"powershell": "Register-ArgumentCompleter",
	} {
		if r := runCLI(t, nil, "completion", shell); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s = %d, want a script with %q:\n%.300s", shell, r.code, want, r.stdout)
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"runs", "re"}, []string{"release", "resolve", "retry"}},
		{[]string{"runs", "resolve", "x", "--"}, []string{"--effect", "--done", "--not-done", "--ref"}},
		{[]string{"runs", "list", "--status", ""}, []string{"queued", "running", "completed", "failed", "cancelled"}},
		{[]string{"runs", "list", "--page"}, []string{"--page-size", "--page-token"}},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}},
	} {
		r := runCLI(t, nil, append([]string{"__complete"}, c.args...)...)
		for _, w := range c.want {
			if r.code != 0 || !strings.Contains(r.stdout, w+"\t") && !strings.Contains(r.stdout, w+"\n") {
				t.Errorf("__complete %v = %d %q; want %q", c.args, r.code, r.stdout, w)
			}
		}
	}
}

// TestCLIWarnsOfMisspeltVariables: a RUNONCE_* variable a few letters from one of the
// CLI's is named with the likely one; the servers' variables, often set in the same
// shell, are not.
func TestCLIWarnsOfMisspeltVariables(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	r := runCLI(t, map[string]string{"RUNONCE_URL": s.url, "RUNONCE_TOKN": "x", "RUNONCE_LEDGER": "sqlite:///x.db", "RUNONCE_AUTH": "none"}, "runs", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "RUNONCE_TOKN is ignored") || !strings.Contains(r.stderr, "did you mean RUNONCE_TOKEN?") ||
		strings.Contains(r.stderr, "RUNONCE_LEDGER") || strings.Contains(r.stderr, "RUNONCE_AUTH") {
		t.Fatalf("runs list = %d, stderr %q; want a warning about RUNONCE_TOKN alone", r.code, r.stderr)
	}
	if r := runCLI(t, map[string]string{"RUNONCE_ULR": s.url}, "runs", "list"); r.code != 2 || !strings.Contains(r.stderr, "did you mean RUNONCE_URL?") {
		t.Fatalf("runs list with RUNONCE_ULR = %d, stderr %q; want the warning, then no URL", r.code, r.stderr)
	}
}

func TestCLISendsTheToken(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	if r := runCLI(t, map[string]string{"RUNONCE_URL": s.url}, "runs", "list", "--token", "tok-123"); r.code != 0 {
		t.Fatalf("runs list --token = %d %q", r.code, r.stderr)
	}
	if got := s.authz.Load(); got != "Bearer tok-123" {
		t.Fatalf("Authorization = %q, want the token", got)
	}
	if r := runCLI(t, map[string]string{"RUNONCE_URL": s.url, "RUNONCE_TOKEN": "tok-env"}, "runs", "list"); r.code != 0 || s.authz.Load() != "Bearer tok-env" {
		t.Fatalf("RUNONCE_TOKEN: %d, Authorization %q", r.code, s.authz.Load())
	}
}

func TestCLIUsesADCForARemoteIngress(t *testing.T) {
	t.Parallel()
	var asked string
	g := &globals{url: "https://runonce.example.com", now: time.Now, newTokenSource: func(_ context.Context, aud string) (client.TokenSource, error) {
		asked = aud
		return nil, errors.New("no credentials")
	}}
	_, err := g.client(t.Context())
	// A user account cannot mint an ID token with the ingress's audience: the way out
	// impersonates the operator account, for that audience, with the email it checks.
	if err == nil || !strings.Contains(err.Error(), "--token \"$(gcloud auth print-identity-token --impersonate-service-account=OPERATOR_SA --audiences=https://runonce.example.com --include-email)\"") ||
		asked != "https://runonce.example.com" {
		t.Fatalf("client() = %v (audience asked %q); want an error naming the --token way out, audience the URL", err, asked)
	}
	g.audience = "custom"
	if _, err = g.client(t.Context()); asked != "custom" || !strings.Contains(err.Error(), "--audiences=custom ") {
		t.Fatalf("audience asked %q (%v), want --audience", asked, err)
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "—"},
		{now.Add(-30 * time.Second), "30s ago"},
		{now.Add(-3 * time.Hour), "3h ago"},
		{now.Add(-72 * time.Hour), "3d ago"},
		{now.Add(90 * time.Second), "in 1m"},
	} {
		if got := Ago(c.t, now); got != c.want {
			t.Errorf("Ago(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}
