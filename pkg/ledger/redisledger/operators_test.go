package redisledger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
)

// step is one call of a scripted history, made on two ledgers with the same Now.
type step func(ctx context.Context, l ledger.Driver, now time.Time) error

func fenceOf(ctx context.Context, l ledger.Driver, id string) (ledger.Fence, error) {
	r, err := l.Get(ctx, &ledger.GetParams{RunID: id})
	if err != nil {
		return ledger.Fence{}, err
	}
	return ledger.Fence{RunID: id, Attempt: r.Attempt, AttemptID: r.AttemptID}, nil
}

// TestHistoryAsTheDriverRecordsIt runs one sequence of every transition that adds events
// on the memory ledger (whose history is driver.Record's by construction) and on Redis,
// with the same times, and wants the same events (the scripts' events, their texts
// clipped on a rune boundary, and the operators' ones) and the same effects.
func TestHistoryAsTheDriverRecordsIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	a, b := ledger.KeyedRunID("hist", "job", uuid.NewString()), ledger.KeyedRunID("hist", "job", uuid.NewString())
	idn := func(id string) ledger.Identity {
		return ledger.Identity{RunID: id, Namespace: "ns", Job: "job", Key: "k", PayloadHash: "h"}
	}
	long := "x" + strings.Repeat("é", 800) // 1601 bytes: clipped to 1023, before a rune
	op := func(id string) *ledger.OperatorParams {
		return &ledger.OperatorParams{RunID: id, Actor: "oncall@example.com", Reason: "because " + strings.Repeat("é", 200)}
	}
	acquire := func(id, worker string, lease time.Duration) step {
		return func(ctx context.Context, l ledger.Driver, now time.Time) error {
			_, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: idn(id), AttemptID: uuid.NewString(), Worker: worker, Lease: lease, Now: now})
			return err
		}
	}
	fenced := func(id string, do func(ledger.Driver, ledger.Fence, time.Time) error) step {
		return func(ctx context.Context, l ledger.Driver, now time.Time) error {
			f, err := fenceOf(ctx, l, id)
			if err != nil {
				return err
			}
			return do(l, f, now)
		}
	}
	begin := func(id, name string) step {
		return fenced(id, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: name, Now: now})
			return err
		})
	}
	resolve := func(id, name string, done bool, ref string) step {
		return func(ctx context.Context, l ledger.Driver, now time.Time) error {
			p := &ledger.ResolveEffectParams{OperatorParams: *op(id), Effect: name, Done: done, Ref: ref}
			p.Now = now
			_, err := l.ResolveEffect(ctx, p)
			return err
		}
	}
	rescue := func(id string) step {
		return func(ctx context.Context, l ledger.Driver, now time.Time) error {
			r, err := l.Get(ctx, &ledger.GetParams{RunID: id})
			if err != nil {
				return err
			}
			_, err = l.Rescue(ctx, &ledger.RescueParams{RunID: id, Status: r.Status, Attempt: r.Attempt, Deadline: r.Deadline, Now: now})
			return err
		}
	}
	steps := []step{
		func(ctx context.Context, l ledger.Driver, now time.Time) error {
			_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: idn(a), AttemptID: "c", Now: now})
			return err
		},
		acquire(a, "host-a/1", 10*time.Second),
		fenced(a, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: 10 * time.Second, Now: now})
			return err
		}),
		fenced(a, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.Release(ctx, &ledger.ReleaseParams{Fence: f, Error: long, Now: now})
			return err
		}),
		acquire(a, strings.Repeat("w", 2000), time.Second),
		acquire(a, "host-c", 10*time.Second), // the lease ran out: lease_lost, started
		begin(a, "run"),
		fenced(a, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.Fail(ctx, &ledger.FailParams{Fence: f, Now: now}) // no error: the event keeps the last one
			return err
		}),
		resolve(a, "run", true, strings.Repeat("r", ledger.MaxEffectRef)), // the event's text clipped in the ref
		acquire(a, "host-c2", 10*time.Second),
		begin(a, "run/2"),
		fenced(a, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.Fail(ctx, &ledger.FailParams{Fence: f, Error: "lost answer", Now: now})
			return err
		}),
		resolve(a, "run/2", false, ""),
		acquire(a, "host-c3", 10*time.Second),
		fenced(a, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.Fail(ctx, &ledger.FailParams{Fence: f, Error: "again", Now: now})
			return err
		}),
		func(ctx context.Context, l ledger.Driver, now time.Time) error {
			p := op(a)
			p.Now = now
			_, err := l.Retry(ctx, p)
			return err
		},
		acquire(a, "host-d", 10*time.Second),
		func(ctx context.Context, l ledger.Driver, now time.Time) error {
			p := op(a)
			p.Now = now
			_, err := l.OperatorRelease(ctx, p)
			return err
		},
		acquire(a, "host-e", 10*time.Second),
		fenced(a, func(l ledger.Driver, f ledger.Fence, now time.Time) error {
			_, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f, Now: now})
			return err
		}),
		func(ctx context.Context, l ledger.Driver, now time.Time) error {
			_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: idn(b), AttemptID: "c", PickupTimeout: time.Second, Now: now})
			return err
		},
		rescue(b), // queued past its pickup deadline: rescued
		acquire(b, "host-f", time.Second),
		rescue(b), // running past its lease: lease_lost
		func(ctx context.Context, l ledger.Driver, now time.Time) error {
			p := op(b)
			p.Now = now
			_, err := l.Cancel(ctx, p)
			return err
		},
	}
	mem := memory.New(nil)
	rl := openTest(t, nil)
	for i, s := range steps {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		if err := s(ctx, mem, now); err != nil {
			t.Fatalf("step %d on memory: %v", i, err)
		}
		if err := s(ctx, rl, now); err != nil {
			t.Fatalf("step %d on redis: %v", i, err)
		}
	}
	for _, id := range []string{a, b} {
		want, err := mem.Get(ctx, &ledger.GetParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		got, err := rl.Get(ctx, &ledger.GetParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.History) != len(want.History) {
			t.Fatalf("run %s: redis history %v, want %v", id, kindsOf(got.History), kindsOf(want.History))
		}
		for i, w := range want.History {
			g := got.History[i]
			if !g.At.Equal(w.At) || g.Kind != w.Kind || g.Attempt != w.Attempt || g.Worker != w.Worker || g.Actor != w.Actor || g.Text != w.Text {
				t.Errorf("run %s event %d:\n got %+v\nwant %+v", id, i, g, w)
			}
		}
		wantFx, err := mem.ListEffects(ctx, &ledger.ListEffectsParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		gotFx, err := rl.ListEffects(ctx, &ledger.ListEffectsParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(derefEffects(gotFx)) != fmt.Sprint(derefEffects(wantFx)) {
			t.Errorf("run %s: redis effects\n%+v\nmemory effects\n%+v", id, derefEffects(gotFx), derefEffects(wantFx))
		}
		if got.Status != want.Status || got.AttemptsMade != want.AttemptsMade || got.LastError != want.LastError {
			t.Errorf("run %s: redis %s, %d attempts made, %q; memory %s, %d, %q", id, got.Status, got.AttemptsMade, got.LastError,
				want.Status, want.AttemptsMade, want.LastError)
		}
	}
}

// derefEffects are the effects as the comparison sees them: without ExpireAt, which
// Redis moves to the run's on each of the run's writes (index_run) and memory leaves.
func derefEffects(es []*ledger.Effect) []ledger.Effect {
	out := make([]ledger.Effect, len(es))
	for i, e := range es {
		out[i] = *e
		out[i].ExpireAt = time.Time{}
	}
	return out
}

func kindsOf(h []ledger.Event) []ledger.EventKind {
	out := make([]ledger.EventKind, len(h))
	for i, e := range h {
		out[i] = e.Kind
	}
	return out
}

// listKeys returns the ledger's listing indexes and how many entries each holds (a test
// may scan; the ledger never does).
func listKeys(t *testing.T, l *Ledger) map[string]int64 {
	t.Helper()
	ctx := t.Context()
	out := map[string]int64{}
	iter := l.rdb.Scan(ctx, 0, l.o.Prefix+"list:*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := l.rdb.ZCard(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out[strings.TrimPrefix(iter.Val(), l.o.Prefix)] = n
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSweepTakesTheListingEntries: a swept run leaves no entry in any listing index nor
// in the names.
func TestSweepTakesTheListingEntries(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	id := ledger.KeyedRunID("sweep", "job", uuid.NewString())
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: "job", Namespace: "ns"}, AttemptID: "a",
		Retention: time.Millisecond, PickupTimeout: time.Millisecond, Now: t0}); err != nil {
		t.Fatal(err)
	}
	p := &ledger.OperatorParams{RunID: id, Actor: "a", Reason: "r", Now: t0.Add(time.Millisecond), Retention: time.Millisecond}
	if _, err := l.Cancel(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, l); len(got) != 7 {
		t.Fatalf("a cancelled run is in the listing indexes %v, want 7 of them (6 and the IDs')", got)
	}
	n, err := l.Sweep(ctx, &ledger.SweepParams{Now: t0.Add(time.Second)})
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if got := listKeys(t, l); len(got) != 0 {
		t.Fatalf("after the sweep the listing indexes hold %v, want nothing", got)
	}
	if n, err := l.rdb.Exists(ctx, l.runKey(id), l.o.Prefix+"names").Result(); err != nil || n != 0 {
		t.Fatalf("after the sweep %d of the run and the names are left (%v), want none", n, err)
	}
}

// TestExpiredRunsLeaveTheListing: the listing entries and the names of runs whose keys
// Redis expired leave with the next claims' trim, without a sweep or a listing, so that
// no index grows with runs long gone.
func TestExpiredRunsLeaveTheListing(t *testing.T) {
	t.Parallel()
	l := openTest(t, &Options{Grace: time.Millisecond})
	ctx := t.Context()
	for i := range 3 {
		job := "old-" + string(rune('a'+i))
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: ledger.KeyedRunID("trim", job, "k"), Job: job, Namespace: "ns-old"},
			AttemptID: "a", Retention: time.Millisecond, PickupTimeout: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	id := ledger.KeyedRunID("trim", "new", uuid.NewString())
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: "new", Namespace: "ns"}, AttemptID: "a"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"list:created": 1, "list:created:job:new": 1, "list:created:ns:ns": 1, "list:created:status:queued": 1,
		"list:updated": 1, "list:updated:status:queued": 1, "list:id": 1}
	if got := listKeys(t, l); len(got) != len(want) || !mapsEqual(got, want) {
		t.Fatalf("listing indexes %v, want only the last claim's %v", got, want)
	}
	if names, err := l.rdb.HKeys(ctx, l.o.Prefix+"names").Result(); err != nil || !slices.Equal(names, []string{id}) {
		t.Fatalf("names of %v (%v), want only the last claim's", names, err)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// TestListDropsStaleEntries: an index entry whose run is gone (its key expired before any
// claim trimmed it), or that no longer matches its index, is neither listed nor kept;
// neither is the ID index's entry of a run that is gone.
func TestListDropsStaleEntries(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	gone, live := ledger.KeyedRunID("stale", "job", uuid.NewString()), ledger.KeyedRunID("stale", "job", uuid.NewString())
	for _, id := range []string{gone, live} {
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: "job"}, AttemptID: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.rdb.Del(ctx, l.runKey(gone)).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := l.Get(ctx, &ledger.GetParams{RunID: live})
	if err != nil {
		t.Fatal(err)
	}
	failed := l.o.Prefix + "list:created:status:failed"
	if err := l.rdb.ZAdd(ctx, failed, redisZ(r.CreatedAt, live)).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.List(ctx, &ledger.ListParams{Job: "job"})
	if err != nil || len(res.Runs) != 1 || res.Runs[0].ID != live {
		t.Fatalf("List(job) = %+v, %v; want only the live run", res, err)
	}
	if res, err := l.List(ctx, &ledger.ListParams{Status: ledger.StatusFailed}); err != nil || len(res.Runs) != 0 {
		t.Fatalf("List(failed) = %+v, %v; want none: the run is queued", res, err)
	}
	if n, _ := l.rdb.ZCard(ctx, l.o.Prefix+"list:created:job:job").Result(); n != 1 {
		t.Fatalf("the job's index holds %d entries after the listing, want the live one", n)
	}
	if n, _ := l.rdb.ZCard(ctx, failed).Result(); n != 0 {
		t.Fatalf("the failed index holds %d entries after the listing, want the stale one dropped", n)
	}
	if ids, err := l.ListRunIDs(ctx, &ledger.ListRunIDsParams{Prefix: gone[:12]}); err != nil || len(ids) != 0 {
		t.Fatalf("ListRunIDs(%s) = %v, %v; want none: the run is gone", gone[:12], ids, err)
	}
	if ids, err := l.ListRunIDs(ctx, &ledger.ListRunIDsParams{Prefix: live[:12]}); err != nil || !slices.Equal(ids, []string{live}) {
		t.Fatalf("ListRunIDs(%s) = %v, %v; want the live run", live[:12], ids, err)
	}
	if ids, _ := l.rdb.ZRange(ctx, l.o.Prefix+"list:id", 0, -1).Result(); !slices.Equal(ids, []string{live}) {
		t.Fatalf("the ID index holds %v after the lookups, want the live run alone", ids)
	}
}

// TestListAnswersResultAndProgress: a listed run carries what the memory ledger's does
// (every field but its payload and history), its result and progress included.
func TestListAnswersResultAndProgress(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	id := ledger.KeyedRunID("listed", "job", uuid.NewString())
	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, Job: "listed", Payload: []byte(`{"n":1}`)},
		AttemptID: "w", Worker: "host", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f := ledger.Fence{RunID: id, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f, Result: []byte(`{"sent":3}`), Progress: []byte(`{"done":3}`)}); err != nil {
		t.Fatal(err)
	}
	res, err := l.List(ctx, &ledger.ListParams{Job: "listed"})
	if err != nil || len(res.Runs) != 1 {
		t.Fatalf("List = %+v, %v; want the run", res, err)
	}
	r := res.Runs[0]
	if string(r.Result) != `{"sent":3}` || string(r.Progress) != `{"done":3}` || r.Payload != nil || r.History != nil || r.Status != ledger.StatusCompleted {
		t.Fatalf("listed run: result %s, progress %s, payload %q, history %v, status %s", r.Result, r.Progress, r.Payload, r.History, r.Status)
	}
}

// TestListPagesThroughEqualTimesAndShortReads: runs created in the same microsecond are
// each listed once, in descending run ID order, across pages; and a listing whose filter
// the index does not serve, with its reads bounded below what it must skip, ends its
// pages short with a cursor that goes on, and finds the run.
func TestListPagesThroughEqualTimesAndShortReads(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	claim := func(job string, at time.Time) string {
		id := ledger.KeyedRunID("page", job, uuid.NewString())
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: job}, AttemptID: "a", Now: at}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	target := claim("rare", t0)
	var same []string
	for range 7 {
		same = append(same, claim("common", t0.Add(time.Second)))
	}
	slices.Sort(same)
	slices.Reverse(same)
	listAll := func(p ledger.ListParams) ([]string, int) {
		var ids []string
		pages := 0
		for ; pages < 50; pages++ {
			res, err := l.List(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Runs {
				ids = append(ids, r.ID)
			}
			if res.Next == "" {
				return ids, pages + 1
			}
			p.Cursor = res.Next
		}
		t.Fatal("the listing does not end")
		return nil, 0
	}
	if got, _ := listAll(ledger.ListParams{Job: "common", PageSize: 2}); !slices.Equal(got, same) {
		t.Fatalf("List(common, 2 a page) = %v, want %v", got, same)
	}
	l.listBudget, l.listCalls = 2, 1
	got, pages := listAll(ledger.ListParams{Job: "rare", UpdatedAfter: t0.Add(-time.Second), PageSize: 5})
	if !slices.Equal(got, []string{target}) || pages < 4 {
		t.Fatalf("List(rare, by update, 2 entries read a page) = %v in %d pages, want the rare run after short pages", got, pages)
	}
	if got, _ := listAll(ledger.ListParams{PageSize: 3}); len(got) != 8 || got[7] != target {
		t.Fatalf("List(all, 2 entries read a page) = %v, want the 8 runs, the rare one last", got)
	}
}

func redisZ(at time.Time, id string) redis.Z {
	return redis.Z{Score: float64(at.UnixMicro()), Member: id}
}

// BenchmarkListVsRaw alternates rounds of a page of List (50 runs of one job, of 2,000)
// and of the raw reads a client would make for it (ZREVRANGE of the job's index, then
// HMGET of each run's listed fields in one pipeline), and reports each rate and their
// ratio.
func BenchmarkListVsRaw(b *testing.B) {
	const round, runs, page = 100, 2000, 50
	l := openTest(b, nil)
	ctx := b.Context()
	for range runs {
		id := ledger.KeyedRunID("bench-list", "job", uuid.NewString())
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: "job", Namespace: "ns",
			Payload: make([]byte, 512)}, AttemptID: "a"}); err != nil {
			b.Fatal(err)
		}
	}
	raw := func() error {
		ids, err := l.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: l.o.Prefix + "list:created:job:job", Start: 0, Stop: page, Rev: true}).Result()
		if err != nil {
			return err
		}
		pipe := l.rdb.Pipeline()
		for _, id := range ids {
			pipe.HMGet(ctx, l.runKey(id), listedFields...)
		}
		_, err = pipe.Exec(ctx)
		return err
	}
	list := func() error {
		res, err := l.List(ctx, &ledger.ListParams{Job: "job", PageSize: page})
		if err == nil && len(res.Runs) != page {
			err = fmt.Errorf("a page of %d runs, want %d", len(res.Runs), page)
		}
		return err
	}
	var rawTime, listTime time.Duration
	var rawOps, listOps int
	timed := func(ops int, op func() error) time.Duration {
		start := time.Now()
		for range ops {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		ops := min(round, b.N-done)
		rawTime += timed(ops, raw)
		rawOps += ops
		listTime += timed(ops, list)
		listOps += ops
	}
	b.StopTimer()
	r := float64(rawOps) / rawTime.Seconds()
	ls := float64(listOps) / listTime.Seconds()
	b.ReportMetric(r, "raw-pages/s")
	b.ReportMetric(ls, "list-pages/s")
	b.ReportMetric(ls/r, "list/raw")
}
