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

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
)

// server is an ingress on a SQLite ledger and an in-process Pub/Sub.
type server struct {
	url   string
	led   ledger.Ledger
	authz atomic.Value // the last Authorization header
}

func newServer(t *testing.T) *server {
	t.Helper()
	ctx := context.Background()
	led, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "runonce.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	ps, err := queue.NewInProcess(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	t.Cleanup(func() { pub.Close() })
	h, err := ingress.New(ingress.Config{Ledger: led, Publisher: pub, Namespace: "ns", Auth: auth.None{}, Operators: auth.None{},
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

// failedRun claims a run of job and fails its first attempt with msg.
func (s *server) failedRun(t *testing.T, job, msg string) string {
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
	id := body["run_id"].(string)
	ctx := t.Context()
	res, err := s.led.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: ledger.PayloadHash([]byte("{}"))}, AttemptID: uuid.NewString(), Worker: "host-b/9"})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	if _, err := s.led.Fail(ctx, &ledger.FailParams{Fence: ledger.Fence{RunID: id, Attempt: 1, AttemptID: res.Run.AttemptID}, Error: msg}); err != nil {
		t.Fatal(err)
	}
	return id
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(t.Context(), args, func(k string) string { return env[k] }, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func TestFindUnderstandRetryAndCancelFromTheCLI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	id := s.failedRun(t, "send-invoices", "smtp: 554 rejected")

	r := runCLI(t, env, "runs", "list", "--status", "failed", "--job", "send-invoices", "--since", "24h")
	if r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "smtp: 554 rejected") || !strings.HasPrefix(r.stdout, "RUN ID") {
		t.Fatalf("runs list = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "list", "--status", "completed", "--json")
	var page ingress.ListJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Runs) != 0 {
		t.Fatalf("runs list --status completed --json = %d %q", r.code, r.stdout)
	}

	r = runCLI(t, env, "runs", "show", id)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "error") || !strings.Contains(r.stdout, "ATTEMPTS") || !strings.Contains(r.stdout, "host-b/9") {
		t.Fatalf("runs show = %d\n%s%s; want the error first and the attempts", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, env, "runs", "retry", id, "--reason", "relay fixed")
	if r.code != 0 || !strings.Contains(r.stdout, "is queued") || !strings.Contains(r.stdout, "republished") {
		t.Fatalf("runs retry = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "cancel", "--reason", "must not go out", id, "--json")
	var act ingress.ActionJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &act) != nil || act.Status != ledger.StatusCancelled {
		t.Fatalf("runs cancel --json = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "runs", "release", id, "--reason", "free it")
	if r.code != 1 || !strings.Contains(r.stderr, "409") || !strings.Contains(r.stderr, "only a running run can be released") {
		t.Fatalf("runs release of a cancelled run = %d %q; want exit 1 naming the 409", r.code, r.stderr)
	}
	r = runCLI(t, env, "runs", "show", id, "--json")
	var d ingress.RunDetailJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil || d.History[len(d.History)-1].Kind != ledger.EventCancelled {
		t.Fatalf("runs show --json = %d\n%s", r.code, r.stdout)
	}
}

func TestCLIErrorsSayWhatFailed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	env := map[string]string{"RUNONCE_URL": s.url}
	id := strings.Repeat("a", 64)
	for _, c := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{env, nil, 2, "no command"},
		{env, []string{"jobs"}, 2, "unknown command"},
		{env, []string{"runs"}, 2, "subcommand"},
		{env, []string{"runs", "explode"}, 2, "unknown subcommand"},
		{env, []string{"runs", "show"}, 2, "needs a run ID"},
		{env, []string{"runs", "show", "xyz"}, 2, "64 lower-case hex"},
		{env, []string{"runs", "show", id, id}, 2, "one run ID"},
		{env, []string{"runs", "cancel", id}, 2, "--reason"},
		{env, []string{"runs", "list", "--colour", "red"}, 2, "colour"},
		{env, []string{"runs", "show", id}, 1, "404"},
		{env, []string{"runs", "list", "--status", "lost"}, 1, "400"},
		{nil, []string{"runs", "list"}, 1, "--url"},
		{map[string]string{"RUNONCE_URL": "http://127.0.0.1:1"}, []string{"runs", "list"}, 1, "connect"},
	} {
		r := runCLI(t, c.env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("runonce %v = %d %q; want %d naming %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	if r := runCLI(t, env, "completion", "bash"); r.code != 0 || !strings.Contains(r.stdout, "complete -F _runonce runonce") {
		t.Errorf("completion bash = %d %q", r.code, r.stdout)
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
	if err == nil || !strings.Contains(err.Error(), "gcloud auth print-identity-token") || asked != "https://runonce.example.com" {
		t.Fatalf("client() = %v (audience asked %q); want an error naming the --token way out, audience the URL", err, asked)
	}
	g.audience = "custom"
	_, _ = g.client(t.Context())
	if asked != "custom" {
		t.Fatalf("audience asked %q, want --audience", asked)
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
