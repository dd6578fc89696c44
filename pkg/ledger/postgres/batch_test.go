package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger"
)

// oneLane opens a ledger over a fresh schema with one lane of each kind (Batches: 1) and
// a tracer that counts its statements.
func oneLane(t *testing.T) (*Ledger, *countingTracer) {
	t.Helper()
	tracer := &countingTracer{}
	return tracedLedger(t, tracer, Options{Batches: 1}), tracer
}

// tracedLedger opens a ledger with opts over a fresh schema, on a pool of its own whose
// connections are Open's (ConfigureConn) and report their statements to tracer.
func tracedLedger(t *testing.T, tracer pgx.QueryTracer, opts Options) *Ledger {
	t.Helper()
	dsn := testDSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ConfigureConn(cfg.ConnConfig)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts.Schema = newSchema(t, dsn)
	l, err := New(t.Context(), pool, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hold runs stmt in a transaction left open, then starts call, which is to wait for
// that transaction on its lane. It returns the transaction and call's answer.
func hold(t *testing.T, l *Ledger, call func() error, stmt string, args ...any) (pgx.Tx, <-chan error) {
	t.Helper()
	tx, err := l.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), stmt, args...); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- call() }()
	// Wait until call's statement waits for the transaction in the server: a lane seen
	// taken may not have sent its statement yet, and on a loaded machine it may send it
	// after the caller's next count of statements.
	for range 1000 {
		var waiting bool
		if err := l.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return tx, done
		}
		select {
		case err := <-done:
			t.Fatalf("the call did not wait for the held transaction: it answered %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the call's statement never waited for the held transaction")
	return nil, nil
}

// blockClaims holds the ledger's one claim lane: it inserts id's run in a transaction
// left open and starts a claim of it, which waits for that transaction. It returns the
// transaction and the claim's answer.
func blockClaims(t *testing.T, l *Ledger, id ledger.Identity) (pgx.Tx, <-chan error) {
	t.Helper()
	tx, done := hold(t, l, func() error {
		_, err := l.Claim(t.Context(), &ledger.ClaimParams{Identity: id, AttemptID: "blocked"})
		return err
	}, rawInsertSQL(l), id.RunID, id.Namespace, id.Job, id.Key, id.ScheduleTime, id.PayloadHash, id.Payload, "blocker")
	waitFor(t, l.claims, 0)
	return tx, done
}

// waitFor waits until b's one lane is taken and n calls wait for it.
func waitFor[In, Out any](t *testing.T, b *batcher[In, Out], n int) {
	t.Helper()
	for range 500 {
		b.mu.Lock()
		busy, q := b.busy, len(b.queue)
		b.mu.Unlock()
		if busy == 1 && q == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the lane was never taken with %d calls queued", n)
}

// TestClaimsShareStatements checks that claims arriving while the claim lanes are busy
// share one statement, and that each still gets its own answer: one creation per run
// among claims of it in the same batch, its duplicates answered with the created run, a
// run that existed before answered as a duplicate, a payload mismatch flagged.
func TestClaimsShareStatements(t *testing.T) {
	t.Parallel()
	l, tracer := oneLane(t)
	ctx := t.Context()
	old := benchIdentity()
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: old, AttemptID: "old"}); err != nil {
		t.Fatal(err)
	}
	tx, blocked := blockClaims(t, l, benchIdentity())

	// 20 new runs, each claimed three times; the old run twice, once with another payload.
	type claim struct {
		p   ledger.ClaimParams
		res *ledger.ClaimResult
		err error
	}
	var claims []*claim
	for i := range 20 {
		id := benchIdentity()
		for j := range 3 {
			claims = append(claims, &claim{p: ledger.ClaimParams{Identity: id, AttemptID: fmt.Sprintf("a%d-%d", i, j)}})
		}
	}
	other := old
	other.Payload = []byte(`{"n":2}`)
	other.PayloadHash = ledger.PayloadHash(other.Payload)
	claims = append(claims, &claim{p: ledger.ClaimParams{Identity: old, AttemptID: "dup"}},
		&claim{p: ledger.ClaimParams{Identity: other, AttemptID: "mismatch"}})
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() { c.res, c.err = l.Claim(ctx, &c.p) })
	}
	waitFor(t, l.claims, len(claims))
	q0 := tracer.queries.Load()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatalf("the blocked claim: %v", err)
	}
	wg.Wait()
	if q := tracer.queries.Load() - q0; q != 2 {
		t.Errorf("releasing the blocked claim and answering %d queued claims took %d statements, want 2 (the rollback and one batch)", len(claims), q)
	}
	created := map[string]string{}
	for _, c := range claims {
		if c.err != nil {
			t.Fatalf("claim %s: %v", c.p.AttemptID, c.err)
		}
		if c.res.Run.ID != c.p.RunID {
			t.Fatalf("claim of %s answered with run %s", c.p.RunID, c.res.Run.ID)
		}
		if c.res.Created {
			if prev, ok := created[c.p.RunID]; ok {
				t.Fatalf("run %s created twice, by %s and %s", c.p.RunID, prev, c.p.AttemptID)
			}
			created[c.p.RunID] = c.p.AttemptID
		}
	}
	for _, c := range claims {
		switch got := c.res; c.p.AttemptID {
		case "dup", "mismatch":
			if got.Created || got.Run.AttemptID != "old" || got.PayloadMismatch != (c.p.AttemptID == "mismatch") {
				t.Errorf("claim %s of the old run = created %v, attempt %s, mismatch %v", c.p.AttemptID, got.Created, got.Run.AttemptID, got.PayloadMismatch)
			}
		default:
			first, ok := created[c.p.RunID]
			if !ok || got.Run.AttemptID != first || got.Run.Status != ledger.StatusQueued || got.PayloadMismatch {
				t.Errorf("claim %s = created %v, attempt %s (creator %s), status %s, mismatch %v",
					c.p.AttemptID, got.Created, got.Run.AttemptID, first, got.Run.Status, got.PayloadMismatch)
			}
			stored, err := l.Get(ctx, &ledger.GetParams{RunID: c.p.RunID})
			if err != nil {
				t.Fatal(err)
			}
			if stored.AttemptID != first || !stored.CreatedAt.Equal(got.Run.CreatedAt) || !stored.ExpireAt.Equal(got.Run.ExpireAt) {
				t.Errorf("run %s stored with attempt %s, created %v, expiring %v; answered %s, %v, %v", c.p.RunID,
					stored.AttemptID, stored.CreatedAt, stored.ExpireAt, got.Run.AttemptID, got.Run.CreatedAt, got.Run.ExpireAt)
			}
			if len(stored.History) != 1 || stored.History[0].Kind != ledger.EventClaimed {
				t.Errorf("run %s history %+v, want one claimed event", c.p.RunID, stored.History)
			}
		}
	}
	if len(created) != 20 {
		t.Errorf("%d runs created, want 20", len(created))
	}
}

// TestClaimLeavesItsBatch checks that a claim whose context ends while it waits for a
// lane answers at once, saying the run may be written, and that the lanes go on.
func TestClaimLeavesItsBatch(t *testing.T) {
	t.Parallel()
	l := openTest(t, &Options{Batches: 1})
	ctx := t.Context()
	tx, blocked := blockClaims(t, l, benchIdentity())
	var left atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := l.Claim(cctx, &ledger.ClaimParams{Identity: benchIdentity(), AttemptID: "short"})
			if errors.Is(err, ledger.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded) {
				left.Add(1)
			} else {
				t.Errorf("a claim whose context ended while queued = %v, want ErrUnavailable wrapping DeadlineExceeded", err)
			}
		})
	}
	wg.Wait()
	if left.Load() != 5 {
		t.Fatalf("%d of 5 queued claims left", left.Load())
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	l.claims.mu.Lock()
	busy, queued := l.claims.busy, len(l.claims.queue)
	l.claims.mu.Unlock()
	if busy != 0 || queued != 0 {
		t.Fatalf("after every claim answered: %d lanes busy, %d claims queued; want none", busy, queued)
	}
	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: benchIdentity(), AttemptID: "after"})
	if err != nil || !res.Created {
		t.Fatalf("a claim after the others left = %+v, %v; want created", res, err)
	}
}

// TestBatcherUnderChurn races many callers through a batcher with few lanes, some of
// them leaving before their answer, with batches of up to 8 calls and of one: every caller that stays is answered with its own
// result, no more batches run at once than there are lanes, none is larger than max,
// and at the end every lane is free and nothing is queued.
func TestBatcherUnderChurn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ lanes, max int }{{1, 8}, {2, 8}, {4, 8}, {2, 1}, {4, 1}} {
		lanes, max := c.lanes, c.max
		t.Run(fmt.Sprintf("lanes=%d/max=%d", lanes, max), func(t *testing.T) {
			t.Parallel()
			var running, most, biggest atomic.Int32
			b := &batcher[int, int]{lanes: lanes, max: max, run: func(_ context.Context, batch []*call[int, int]) {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				for s := biggest.Load(); int32(len(batch)) > s && !biggest.CompareAndSwap(s, int32(len(batch))); s = biggest.Load() {
				}
				time.Sleep(time.Duration(len(batch)%3) * 100 * time.Microsecond)
				for _, c := range batch {
					c.out = c.in * 2
				}
			}}
			var wg sync.WaitGroup
			var left atomic.Int32
			for i := range 2000 {
				wg.Go(func() {
					ctx := t.Context()
					if i%7 == 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, time.Duration(i%5)*50*time.Microsecond)
						defer cancel()
					}
					out, answered, err := b.do(ctx, i)
					switch {
					case !answered && err != nil:
						left.Add(1)
					case err != nil || out != 2*i:
						t.Errorf("call %d = %d, %v", i, out, err)
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("callers still waiting after 30 s: the batcher is stuck")
			}
			if m := most.Load(); m > int32(lanes) {
				t.Errorf("%d batches ran at once, want at most %d", m, lanes)
			}
			if s := biggest.Load(); s > int32(max) {
				t.Errorf("a batch of %d calls, want at most %d", s, max)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.busy != 0 || len(b.queue) != 0 {
				t.Errorf("at the end: %d lanes busy, %d calls queued; want none", b.busy, len(b.queue))
			}
			t.Logf("%d callers left before their answer; batches of up to %d", left.Load(), biggest.Load())
		})
	}
}

// TestWorkerCallsShareStatements checks that worker claims and completions arriving while
// the lane is busy share one statement, and that each is decided as alone: queued runs
// taken, a run claimed twice taken once (the other held), an absent run created in the
// batch's statement (but not one that must exist), a payload mismatch refused; completions with their fence done, a repeat answered with the
// completed run, a stale fence refused with ErrLeaseLost.
func TestWorkerCallsShareStatements(t *testing.T) {
	t.Parallel()
	l, tracer := oneLane(t)
	ctx := t.Context()
	queued := func() ledger.Identity {
		id := benchIdentity()
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: "ingress"}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// lock locks run id in a transaction while call waits for it on the lane.
	lock := func(id string, call func() error) (pgx.Tx, <-chan error) {
		return hold(t, l, call, `SELECT 1 FROM `+pgx.Identifier{l.Schema(), "runs"}.Sanitize()+` WHERE run_id = $1 FOR UPDATE`, id)
	}
	release := func(tx pgx.Tx, blocked <-chan error) int64 {
		q0 := tracer.queries.Load()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-blocked; err != nil {
			t.Fatalf("the blocked call: %v", err)
		}
		return q0
	}

	// Worker claims.
	blocker := queued()
	tx, blocked := lock(blocker.RunID, func() error {
		_, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: blocker, AttemptID: "blocker"})
		return err
	})
	waitFor(t, l.acquires, 0)
	type acq struct {
		p   ledger.AcquireParams
		res *ledger.AcquireResult
		err error
	}
	var acqs []*acq
	for i := range 10 {
		acqs = append(acqs, &acq{p: ledger.AcquireParams{Identity: queued(), AttemptID: fmt.Sprintf("w%d", i), Worker: "host/1"}})
	}
	twice := queued()
	absent, gone := benchIdentity(), benchIdentity()
	other := queued()
	other.Payload = []byte(`{"n":2}`)
	other.PayloadHash = ledger.PayloadHash(other.Payload)
	acqs = append(acqs, &acq{p: ledger.AcquireParams{Identity: twice, AttemptID: "twice-1"}},
		&acq{p: ledger.AcquireParams{Identity: twice, AttemptID: "twice-2"}},
		&acq{p: ledger.AcquireParams{Identity: absent, AttemptID: "absent", Worker: "host/2"}},
		&acq{p: ledger.AcquireParams{Identity: gone, AttemptID: "gone", MustExist: true}},
		&acq{p: ledger.AcquireParams{Identity: other, AttemptID: "mismatch"}})
	var wg sync.WaitGroup
	for _, a := range acqs {
		wg.Go(func() { a.res, a.err = l.Acquire(ctx, &a.p) })
	}
	waitFor(t, l.acquires, len(acqs))
	q0 := release(tx, blocked)
	wg.Wait()
	// The rollback, the batch, then the upsert alone for each of the second claim of one
	// run and the mismatch, and the locking read (in its transaction: begin, read,
	// rollback) that finds the run that must exist absent.
	if q := tracer.queries.Load() - q0; q != 7 {
		t.Errorf("%d worker claims after the blocked one took %d statements, want 7", len(acqs), q)
	}
	got := map[string]ledger.AcquireOutcome{}
	for _, a := range acqs {
		if a.p.AttemptID == "gone" {
			if !errors.Is(a.err, ledger.ErrNotFound) {
				t.Errorf("acquire of an absent run that must exist: %v, %v; want ErrNotFound", a.res, a.err)
			}
			continue
		}
		if a.err != nil {
			t.Fatalf("acquire %s: %v", a.p.AttemptID, a.err)
		}
		got[a.p.AttemptID] = a.res.Outcome
		if a.res.Outcome == ledger.OutcomeAcquired && (a.res.Run.AttemptID != a.p.AttemptID || a.res.Run.Attempt != 1 || a.res.Run.Status != ledger.StatusRunning) {
			t.Errorf("acquire %s took %+v", a.p.AttemptID, a.res.Run)
		}
	}
	for i := range 10 {
		if o := got[fmt.Sprintf("w%d", i)]; o != ledger.OutcomeAcquired {
			t.Errorf("acquire w%d of a queued run: %v, want acquired", i, o)
		}
	}
	loser := "twice-2" // the goroutines queued in any order
	if got["twice-2"] == ledger.OutcomeAcquired {
		loser = "twice-1"
	}
	if got["twice-1"] == got["twice-2"] || got[loser] != ledger.OutcomeHeld {
		t.Errorf("two claims of one run: %v and %v, want one acquired and the other held", got["twice-1"], got["twice-2"])
	}
	if got["absent"] != ledger.OutcomeAcquired || got["mismatch"] != ledger.OutcomePayloadMismatch {
		t.Errorf("absent run: %v (want acquired); other payload: %v (want payload mismatch)", got["absent"], got["mismatch"])
	}
	r, err := l.Get(ctx, &ledger.GetParams{RunID: acqs[0].p.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.History; len(h) != 2 || h[1].Kind != ledger.EventStarted || h[1].Worker != "host/1" || h[1].Attempt != 1 {
		t.Errorf("history of a run taken in a batch: %+v, want claimed, then started by host/1", h)
	}
	r, err = l.Get(ctx, &ledger.GetParams{RunID: absent.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.History; r.Job != absent.Job || r.Key != absent.Key || !r.ScheduleTime.Equal(absent.ScheduleTime) || string(r.Payload) != string(absent.Payload) ||
		len(h) != 1 || h[0].Kind != ledger.EventStarted || h[0].Worker != "host/2" {
		t.Errorf("a run created in a batch: %+v, want %+v with only its started event by host/2", r, absent)
	}
	if _, err := l.Get(ctx, &ledger.GetParams{RunID: gone.RunID}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the run that had to exist: %v, want ErrNotFound (not created)", err)
	}

	// Completions.
	fence := func(a *acq) ledger.Fence { return ledger.Fence{RunID: a.p.RunID, Attempt: 1, AttemptID: a.p.AttemptID} }
	tx, blocked = lock(acqs[0].p.RunID, func() error {
		_, err := l.Complete(ctx, &ledger.CompleteParams{Fence: fence(acqs[0])})
		return err
	})
	waitFor(t, l.completes, 0)
	type comp struct {
		p   ledger.CompleteParams
		res *ledger.Run
		err error
	}
	var comps []*comp
	for _, a := range acqs[1:10] {
		comps = append(comps, &comp{p: ledger.CompleteParams{Fence: fence(a), Result: []byte(`{"ok":true}`)}})
	}
	comps = append(comps, &comp{p: comps[0].p}, // a repeat
		&comp{p: ledger.CompleteParams{Fence: ledger.Fence{RunID: twice.RunID, Attempt: 1, AttemptID: loser}}}) // not the holder
	for _, c := range comps {
		wg.Go(func() { c.res, c.err = l.Complete(ctx, &c.p) })
	}
	waitFor(t, l.completes, len(comps))
	q0 = release(tx, blocked)
	wg.Wait()
	// The rollback, the batch, then alone the repeat and the stale fence, each an UPDATE
	// that changes nothing and the read of the run for its verdict.
	if q := tracer.queries.Load() - q0; q != 6 {
		t.Errorf("%d completions after the blocked one took %d statements, want 6", len(comps), q)
	}
	for i, c := range comps {
		switch {
		case i == len(comps)-1:
			if !errors.Is(c.err, ledger.ErrLeaseLost) {
				t.Errorf("completion with a stale fence = %v, %v; want ErrLeaseLost", c.res, c.err)
			}
		case c.err != nil:
			t.Errorf("complete %s: %v", c.p.AttemptID, c.err)
		case c.res.Status != ledger.StatusCompleted || c.res.AttemptsMade != 1:
			t.Errorf("complete %s = %+v", c.p.AttemptID, c.res)
		case string(c.res.Result) != `{"ok":true}`:
			t.Errorf("complete %s stored result %q", c.p.AttemptID, c.res.Result)
		}
	}
	r, err = l.Get(ctx, &ledger.GetParams{RunID: acqs[1].p.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.History; len(h) != 3 || h[2].Kind != ledger.EventCompleted || string(r.Result) != `{"ok":true}` || r.CompletedAt.IsZero() {
		t.Errorf("a run completed in a batch: history %+v, result %q, completed at %v", h, r.Result, r.CompletedAt)
	}
	if n := storedEvents(t, l, acqs[1].p.RunID); n != 1 {
		t.Errorf("a run completed in a batch has %d rows of run_events, want 1 (started; the completion is the row)", n)
	}
}
