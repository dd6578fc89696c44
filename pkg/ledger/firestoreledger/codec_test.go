package firestoreledger

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// TestNewRunDocument reads back the documents that create a run, on the emulator: the
// ingress claim's (queued) and a worker's claim of an absent run (running). Each holds
// every field a query reads and no null or zero sparse field, and it reads back as the
// run the call returned.
func TestNewRunDocument(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	l := openLedger(t, client, &Options{Prefix: uniquePrefix()})
	ctx := t.Context()
	always := []string{"created_at", "deadline", "expire_at", "history", "job", "key", "namespace", "payload_hash", "status", "updated_at"}
	check := func(what string, run *ledger.Run, sparse ...string) {
		t.Helper()
		snap, err := l.runs.Doc(run.ID).Get(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		data := snap.Data()
		for k, v := range data {
			if v == nil {
				t.Errorf("%s: field %s is null: a new run's document leaves out what it does not have", what, k)
			}
		}
		if got, want := slices.Sorted(maps.Keys(data)), slices.Sorted(slices.Values(append(always, sparse...))); !slices.Equal(got, want) {
			t.Errorf("%s: fields %v, want %v", what, got, want)
		}
		got, err := decodeRun(snap)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(run, got); diff != "" {
			t.Errorf("%s: the document reads back otherwise than the run returned (-returned +read):\n%s", what, diff)
		}
	}

	key := uuid.NewString()
	ident := ledger.Identity{RunID: ledger.KeyedRunID("ns", "job", key), Namespace: "ns", Job: "job", Key: key, PayloadHash: ledger.PayloadHash(nil)}
	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
	if err != nil || !res.Created {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	check("the ingress claim", res.Run, "attempt_id")

	st := time.Now().Truncate(time.Second)
	ident = ledger.Identity{RunID: ledger.ScheduledRunID("ns", "job", "nightly", st), Namespace: "ns", Job: "job", Key: "nightly",
		ScheduleTime: st, PayloadHash: ledger.PayloadHash([]byte(`{"n":1}`)), Payload: []byte(`{"n":1}`)}
	acq, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
	if err != nil || acq.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire = %+v, %v", acq, err)
	}
	check("a worker's claim of an absent run", acq.Run, "attempt", "attempt_id", "payload", "schedule_time")
}
