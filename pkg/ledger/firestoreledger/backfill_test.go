package firestoreledger

import (
	"context"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// earlierRelease writes, on l's collections, documents as an earlier release left them
// (no shard): a queued run past its pickup deadline, a cancelled run past its expiry,
// and an expired effect of a run that is gone. It returns the two runs' IDs.
func earlierRelease(t *testing.T, l *Ledger) (lost, expired string) {
	t.Helper()
	ctx := t.Context()
	claim := func(key string) string {
		id := ledger.KeyedRunID("ns", "old", key)
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Namespace: "ns", Job: "old", Key: key,
			PayloadHash: ledger.PayloadHash(nil)}, AttemptID: uuid.NewString(), PickupTimeout: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	lost, expired = claim("lost-"+uuid.NewString()), claim("expired-"+uuid.NewString())
	if _, err := l.Cancel(ctx, &ledger.OperatorParams{RunID: expired, Actor: "op@example.com", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	for _, u := range []struct {
		ref *firestore.DocumentRef
		up  []firestore.Update
	}{
		{l.runs.Doc(lost), nil},
		{l.runs.Doc(expired), []firestore.Update{{Path: fieldExpireAt, Value: past}}},
	} {
		if _, err := u.ref.Update(ctx, append(u.up, firestore.Update{Path: ShardField, Value: firestore.Delete})); err != nil {
			t.Fatal(err)
		}
	}
	gone := ledger.KeyedRunID("ns", "old", "gone-"+uuid.NewString())
	e := encodeEffect(&ledger.Effect{Key: ledger.EffectKey(gone, "charge"), RunID: gone, Name: "charge", Status: ledger.EffectDone,
		CreatedAt: past, UpdatedAt: past, DoneAt: past, ExpireAt: past})
	delete(e, ShardField)
	if _, err := l.effects.Doc(ledger.EffectKey(gone, "charge")).Create(ctx, e); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // past the pickup deadline
	return lost, expired
}

func listed(t *testing.T, l *Ledger) []string {
	t.Helper()
	page, err := l.List(t.Context(), &ledger.ListParams{Job: "old"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range page.Runs {
		ids = append(ids, r.ID)
	}
	return ids
}

func rescuable(t *testing.T, l *Ledger) []string {
	t.Helper()
	runs, err := l.ListRescue(t.Context(), &ledger.ListRescueParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestSweepBackfillsShards: the documents an earlier release wrote without a shard are
// invisible to the sharded queries; an hour after this release first ran, the workers'
// Sweep gives them their shard, once per database, and they are then listed, rescued
// and swept.
func TestSweepBackfillsShards(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	l := openLedger(t, client, &Options{Prefix: uniquePrefix()})
	ctx := t.Context()
	lost, expired := earlierRelease(t, l)
	if got := listed(t, l); len(got) != 0 {
		t.Fatalf("List sees %v before the backfill: the test's documents are not an earlier release's", got)
	}
	if n, err := l.Sweep(ctx, &ledger.SweepParams{}); err != nil || n != 0 {
		t.Fatalf("first Sweep = %d, %v", n, err)
	}
	if slices.Contains(rescuable(t, l), lost) || len(listed(t, l)) != 0 {
		t.Fatal("the first Sweep backfilled: it must wait for the earlier release's instances to be gone")
	}
	marker := client.Collection(l.Prefix() + MetaCollection).Doc(backfillDoc)
	if _, err := marker.Update(ctx, []firestore.Update{{Path: "started", Value: time.Now().Add(-backfillSettle - time.Minute)}}); err != nil {
		t.Fatalf("the first Sweep recorded no start: %v", err)
	}
	if _, err := l.Sweep(ctx, &ledger.SweepParams{}); err != nil {
		t.Fatal(err)
	}
	snap, err := marker.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var st backfillState
	if err := snap.DataTo(&st); err != nil || !st.Done || st.Fixed != 3 {
		t.Fatalf("backfill progress %+v, %v; want done, 3 documents fixed", st, err)
	}
	if got := rescuable(t, l); !slices.Contains(got, lost) {
		t.Errorf("ListRescue after the backfill = %v, want the earlier release's %s", got, lost)
	}
	if got := listed(t, l); len(got) != 2 {
		t.Errorf("List after the backfill = %v, want the earlier release's 2 runs", got)
	}
	if n, err := l.Sweep(ctx, &ledger.SweepParams{}); err != nil || n != 2 {
		t.Errorf("Sweep after the backfill = %d, %v; want the expired run %s and the orphan effect deleted", n, err, expired)
	}
}

// TestBackfillShardsPages walks both collections a document at a time.
func TestBackfillShardsPages(t *testing.T) {
	t.Parallel()
	l := openLedger(t, sharedClient(t), &Options{Prefix: uniquePrefix()})
	earlierRelease(t, l)
	var positions []string
	total := 0
	for pos := ""; ; {
		next, n, err := l.BackfillShards(context.Background(), pos, 1)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		positions = append(positions, next)
		if next == "" {
			break
		}
		pos = next
	}
	if total != 3 || len(positions) != 5 {
		t.Fatalf("fixed %d documents through the positions %q; want 3 in 5 steps (2 runs, the switch to effects, 1 effect, done)", total, positions)
	}
	if _, n, err := l.BackfillShards(context.Background(), "", 10); err != nil || n != 0 {
		t.Fatalf("a second pass fixed %d, %v; want none", n, err)
	}
	if _, _, err := l.BackfillShards(context.Background(), "other/x", 10); err == nil {
		t.Fatal("a position of no collection was accepted")
	}
}

// TestWriteAddsShard: a transition of a run an earlier release wrote without a shard
// gives it its shard, though no other field of the write asks for it.
func TestWriteAddsShard(t *testing.T) {
	t.Parallel()
	l := openLedger(t, sharedClient(t), &Options{Prefix: uniquePrefix()})
	ctx := t.Context()
	lost, _ := earlierRelease(t, l)
	if _, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: lost, PayloadHash: ledger.PayloadHash(nil)},
		AttemptID: uuid.NewString(), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	snap, err := l.runs.Doc(lost).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := snap.DataAt(ShardField); err != nil || got != ShardOf(lost) {
		t.Fatalf("shard after a worker claim = %v, %v; want %d", got, err, ShardOf(lost))
	}
}
