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

// blockClaims holds the ledger's one claim lane: it inserts id's run in a transaction
// left open and starts a claim of it, which waits for that transaction. It returns the
// transaction and the claim's answer.
func blockClaims(t *testing.T, l *Ledger, id ledger.Identity) (pgx.Tx, <-chan error) {
	t.Helper()
	ctx := t.Context()
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, rawInsertSQL(l), id.RunID, id.Namespace, id.Job, id.Key, id.ScheduleTime,
		id.PayloadHash, id.Payload, "blocker"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: "blocked"})
		done <- err
	}()
	waitForLockWait(t, l)
	return tx, done
}

// waitQueued waits until n claims wait for a lane.
func waitQueued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	for range 500 {
		l.claims.mu.Lock()
		q := len(l.claims.queue)
		l.claims.mu.Unlock()
		if q == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d claims never queued", n)
}

// TestClaimsShareStatements checks that claims arriving while the claim lanes are busy
// share one statement, and that each still gets its own answer: one creation per run
// among claims of it in the same batch, its duplicates answered with the created run, a
// run that existed before answered as a duplicate, a payload mismatch flagged.
func TestClaimsShareStatements(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := New(t.Context(), pool, &Options{Schema: newSchema(t, dsn), ClaimBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
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
	waitQueued(t, l, len(claims))
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
	l := openTest(t, &Options{ClaimBatches: 1})
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
// them leaving before their answer: every caller that stays is answered with its own
// result, no more batches run at once than there are lanes, none is larger than max,
// and at the end every lane is free and nothing is queued.
func TestBatcherUnderChurn(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			t.Parallel()
			var running, most, biggest atomic.Int32
			b := &batcher[int, int]{lanes: lanes, max: 8, run: func(_ context.Context, batch []*call[int, int]) {
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
			if s := biggest.Load(); s > 8 {
				t.Errorf("a batch of %d calls, want at most 8", s)
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
