package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/ledger"
)

// TestClaimEventIsTheRow checks that an ingress claim writes no row of run_events (its
// event is the run's row, migration 00008) and that Get still puts the claimed event
// first, before the worker's; and that a run a worker claim created has no claimed event.
func TestClaimEventIsTheRow(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	events := func(id string) int {
		var n int
		if err := l.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{l.Schema(), "run_events"}.Sanitize()+` WHERE run_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
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
