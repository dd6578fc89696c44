package driver_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// TestEffectRulesLookAtTheFenceOnly: an effect's verdict depends on its run's fence
// alone (ID, status, attempt, attempt ID), as driver.Store promises a backend that reads
// no more of the run (Spanner's, so that an effect's write does not lock the cells the
// holder's renewal writes). A rule that looked at another field of the run would decide
// otherwise on the fence alone, and this test would fail.
func TestEffectRulesLookAtTheFenceOnly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	full := func(status ledger.Status, attempt int64, id string, deadline time.Time) *ledger.Run {
		return &ledger.Run{
			ID: ledger.KeyedRunID("ns", "job", "k"), Namespace: "ns", Job: "job", Key: "k", Status: status,
			Attempt: attempt, AttemptID: id, PayloadHash: "h", Payload: []byte(`{}`),
			Deadline: deadline, NotBefore: now.Add(time.Hour), AttemptsMade: 3, LastError: "e",
			CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Minute), CompletedAt: now,
			ExpireAt: now.Add(time.Hour), Progress: []byte(`{"done":1}`), Result: []byte(`1`),
			History: []ledger.Event{{At: now, Kind: ledger.EventStarted, Attempt: attempt}},
		}
	}
	fenceOnly := func(r *ledger.Run) *ledger.Run {
		return &ledger.Run{ID: r.ID, Status: r.Status, Attempt: r.Attempt, AttemptID: r.AttemptID}
	}
	runs := []*ledger.Run{nil}
	for _, deadline := range []time.Time{now.Add(-time.Hour), now.Add(time.Hour)} { // lapsed, live
		runs = append(runs, full(ledger.StatusRunning, 2, "a", deadline), full(ledger.StatusRunning, 3, "b", deadline),
			full(ledger.StatusQueued, 2, "a", deadline), full(ledger.StatusCompleted, 2, "a", deadline),
			full(ledger.StatusCancelled, 2, "a", deadline))
	}
	pending := &ledger.Effect{Key: "k", RunID: ledger.KeyedRunID("ns", "job", "k"), Name: "charge", Status: ledger.EffectPending, Attempt: 2,
		CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Minute), ExpireAt: now.Add(time.Hour)}
	done := *pending
	done.Status, done.DoneAt = ledger.EffectDone, now.Add(-time.Second)
	f := ledger.Fence{RunID: ledger.KeyedRunID("ns", "job", "k"), Attempt: 2, AttemptID: "a"}
	for _, r := range runs {
		var fr *ledger.Run
		if r != nil {
			fr = fenceOnly(r)
		}
		for _, e := range []*ledger.Effect{nil, pending, &done} {
			e1, res1, err1 := driver.ApplyBeginEffect(r, e, &ledger.BeginEffectParams{Fence: f, Name: "charge"}, now)
			e2, res2, err2 := driver.ApplyBeginEffect(fr, e, &ledger.BeginEffectParams{Fence: f, Name: "charge"}, now)
			if !reflect.DeepEqual(e1, e2) || !reflect.DeepEqual(res1, res2) || errString(err1) != errString(err2) {
				t.Errorf("BeginEffect on run %+v, effect %+v: %v %v %v with the whole run, %v %v %v with its fence", r, e, e1, res1, err1, e2, res2, err2)
			}
			c1, a1, err1 := driver.ApplyCompleteEffect(r, e, &ledger.CompleteEffectParams{Fence: f, Name: "charge"}, now)
			c2, a2, err2 := driver.ApplyCompleteEffect(fr, e, &ledger.CompleteEffectParams{Fence: f, Name: "charge"}, now)
			if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(a1, a2) || errString(err1) != errString(err2) {
				t.Errorf("CompleteEffect on run %+v, effect %+v: %v %v %v with the whole run, %v %v %v with its fence", r, e, c1, a1, err1, c2, a2, err2)
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
