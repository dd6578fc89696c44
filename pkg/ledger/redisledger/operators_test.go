package redisledger

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
)

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

// TestSweepTakesHistoryAndListing: a swept run leaves no history and no entry in any
// listing index.
func TestSweepTakesHistoryAndListing(t *testing.T) {
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
	if got := listKeys(t, l); len(got) != 6 {
		t.Fatalf("a cancelled run is in the listing indexes %v, want 6 of them", got)
	}
	n, err := l.Sweep(ctx, &ledger.SweepParams{Now: t0.Add(time.Second)})
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if got := listKeys(t, l); len(got) != 0 {
		t.Fatalf("after the sweep the listing indexes hold %v, want nothing", got)
	}
	if n, err := l.rdb.Exists(ctx, l.historyKey(id), l.o.Prefix+"names").Result(); err != nil || n != 0 {
		t.Fatalf("after the sweep %d of the history and the names are left (%v), want none", n, err)
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
		"list:updated": 1, "list:updated:status:queued": 1}
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
// claim trimmed it), or that no longer matches its index, is neither listed nor kept.
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
