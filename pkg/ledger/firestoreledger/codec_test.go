package firestoreledger

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// TestNewRunDocument reads back the documents that create a run, on the emulator: the
// ingress claim's (queued) and a worker's claim of an absent run (running). Each holds
// every field a query reads (its shard, ShardOf its ID, included) and no null or zero
// sparse field, and it reads back as the run the call returned.
func TestNewRunDocument(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	l := openLedger(t, client, &Options{Prefix: uniquePrefix()})
	ctx := t.Context()
	always := []string{"created_at", "deadline", "expire_at", "history", "job", "key", "namespace", "payload_hash", "shard", "status", "updated_at"}
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
		if got, want := data[ShardField], ShardOf(run.ID); got != want {
			t.Errorf("%s: shard %v, want %d (ShardOf %s)", what, got, want, run.ID)
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

// BenchmarkNewRunDocument measures what the client's conversion of a new run's document
// costs (a WriteBatch's Create: the conversion to protos, no RPC) against the bare floor's
// two-field document (internal/benchbase.BareFirestore's), in the same run: the part of
// a claim's CPU that the run document's shape decides.
func BenchmarkNewRunDocument(b *testing.B) {
	client := sharedClient(b)
	ref := client.Collection("runs").Doc(strings.Repeat("a", 64))
	now := time.Now()
	run := &ledger.Run{ID: ref.ID, Namespace: "default", Job: "send-invoices", Key: "nightly-2026-12-03",
		PayloadHash: ledger.PayloadHash([]byte(`{"n":1}`)), Payload: []byte(`{"n":1}`), Status: ledger.StatusQueued,
		AttemptID: uuid.NewString(), Deadline: now.Add(5 * time.Minute), CreatedAt: now, UpdatedAt: now,
		ExpireAt: now.Add(14 * 24 * time.Hour), History: []ledger.Event{{At: now, Kind: ledger.EventClaimed}}}
	for _, doc := range []struct {
		name string
		data func() any
	}{
		{"run", func() any { return encodeNewRun(run) }},
		{"bare", func() any { return map[string]any{"payload": run.Payload, "created_at": firestore.ServerTimestamp} }},
	} {
		b.Run(doc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				//lint:ignore SA1019 a WriteBatch converts a document without sending it, which no other API does
				client.Batch().Create(ref, doc.data())
			}
		})
	}
}
