package postgres

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/runonce/runonce/pkg/ledger"
)

// TestClaimEventIsTheRow checks that an ingress claim writes no row of run_events (its
// event is the run's row, migration 0008) and that Get still puts the claimed event
// first, before the worker's; and that a run a worker claim created has no claimed event.
func TestClaimEventIsTheRow(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	events := func(id string) int { return storedEvents(t, l, id) }
	id := benchIdentity()
	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: "ingress"})
	if err != nil || !res.Created {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	if n := events(id.RunID); n != 0 {
		t.Errorf("the ingress claim wrote %d rows of run_events, want none", n)
	}
	if _, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: "w", Worker: "host/1"}); err != nil {
		t.Fatal(err)
	}
	r, err := l.Get(ctx, &ledger.GetParams{RunID: id.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.History; len(h) != 2 || h[0].Kind != ledger.EventClaimed || !h[0].At.Equal(r.CreatedAt) || h[0].Attempt != 0 ||
		h[1].Kind != ledger.EventStarted {
		t.Errorf("history %+v, want claimed at the creation, then started", h)
	}
	alone := benchIdentity()
	if _, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: alone, AttemptID: "w"}); err != nil {
		t.Fatal(err)
	}
	r, err = l.Get(ctx, &ledger.GetParams{RunID: alone.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.History; len(h) != 1 || h[0].Kind != ledger.EventStarted {
		t.Errorf("history of a run a worker claim created: %+v, want started alone", h)
	}
}

// TestCompletedEventIsTheRow checks that a completion, alone or among concurrent ones,
// writes no row of run_events (its event is the run's row, migration 0010) and that Get puts the
// completed event last, at the completion, of the run's attempt; and that a failure still
// stores its event.
func TestCompletedEventIsTheRow(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	running := func() ledger.Fence {
		id := benchIdentity()
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: "ingress"}); err != nil {
			t.Fatal(err)
		}
		res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: "w-" + id.RunID, Worker: "host/1"})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		return ledger.Fence{RunID: id.RunID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
	}
	check := func(what string, f ledger.Fence) {
		t.Helper()
		if n := storedEvents(t, l, f.RunID); n != 1 {
			t.Errorf("%s: the run has %d rows of run_events, want 1 (started)", what, n)
		}
		r, err := l.Get(ctx, &ledger.GetParams{RunID: f.RunID})
		if err != nil {
			t.Fatal(err)
		}
		if h := r.History; len(h) != 3 || h[0].Kind != ledger.EventClaimed || h[1].Kind != ledger.EventStarted ||
			h[2].Kind != ledger.EventCompleted || !h[2].At.Equal(r.CompletedAt) || h[2].Attempt != f.Attempt ||
			h[2].Worker != "" || h[2].Actor != "" || h[2].Text != "" {
			t.Errorf("%s: history %+v, want claimed, started, then completed at %v of attempt %d", what, h, r.CompletedAt, f.Attempt)
		}
	}

	alone := running()
	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: alone}); err != nil {
		t.Fatal(err)
	}
	check("a completion alone", alone)

	// Completions that arrive together: those that find the lane busy share a batch's
	// statement (TestWorkerCallsShareStatements makes sure of one such batch).
	fences := make([]ledger.Fence, 16)
	for i := range fences {
		fences[i] = running()
	}
	var wg sync.WaitGroup
	for _, f := range fences {
		wg.Go(func() {
			if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, f := range fences {
		check("a completion among many", f)
	}

	failed := running()
	if _, err := l.Fail(ctx, &ledger.FailParams{Fence: failed, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	if n := storedEvents(t, l, failed.RunID); n != 2 {
		t.Errorf("a failure: the run has %d rows of run_events, want 2 (started, failed)", n)
	}
}

// TestHistoryMigratesDown checks that migrating below 0008 stores again the events the
// rows held (the ingress claim's, migration 0008; the completion's, 0010), each where
// the history has it, so that the code before reads the history as it was.
func TestHistoryMigratesDown(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	id := benchIdentity()
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: "ingress"}); err != nil {
		t.Fatal(err)
	}
	hold := func(attempt string) ledger.Fence {
		res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: attempt})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		return ledger.Fence{RunID: id.RunID, Attempt: res.Run.Attempt, AttemptID: attempt}
	}
	if _, err := l.Release(ctx, &ledger.ReleaseParams{Fence: hold("w1"), Error: "again"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: hold("w2")}); err != nil {
		t.Fatal(err)
	}
	want, err := l.Get(ctx, &ledger.GetParams{RunID: id.RunID})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(testDSN(t)) // the URL may set the pool's parameters
	if err != nil {
		t.Fatal(err)
	}
	cfg := pc.ConnConfig
	cfg.RuntimeParams["search_path"] = pgx.Identifier{l.Schema()}.Sanitize()
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("migrate down to 7: %v", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT kind, at, attempt, text FROM run_events WHERE run_id = $1 ORDER BY seq`, id.RunID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []ledger.Event
	for rows.Next() {
		var e ledger.Event
		if err := rows.Scan(&e.Kind, &e.At, &e.Attempt, &e.Text); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.History) {
		t.Fatalf("stored history after migrating down: %+v, want %+v", got, want.History)
	}
	for i, e := range want.History {
		if g := got[i]; g.Kind != e.Kind || !g.At.Equal(e.At) || g.Attempt != e.Attempt || g.Text != e.Text {
			t.Errorf("event %d stored after migrating down: %+v, want %+v (history %+v)", i, g, e, got)
		}
	}
}

// storedEvents counts the rows of run_events of run id.
func storedEvents(t *testing.T, l *Ledger, id string) int {
	t.Helper()
	var n int
	if err := l.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{l.Schema(), "run_events"}.Sanitize()+` WHERE run_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
