package sqlite

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// TestListingPlansUseIndexes fills a ledger with 30,000 runs (mostly completed, of 50
// jobs in 3 namespaces; a few failed, running, queued) and checks, for each shape of
// listing, that its query reads one of the listing's indexes, with no scan of the whole
// table and no sort but where the shape means one (a few runs of one status by creation,
// the merge of the statuses by update), and that List pages through the same runs, in
// the same order, as a sort of them all (its first pages).
func TestListingPlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	base := time.Now().Add(-10 * time.Hour).Truncate(time.Second)
	if _, err := l.db.ExecContext(ctx, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 30000)
		INSERT INTO runs (run_id, namespace, job, key, schedule_time, status, attempt, attempt_id, deadline, not_before,
			payload_hash, payload, attempts_made, last_error, created_at, updated_at, completed_at, expire_at)
		SELECT printf('%064x', i), 'ns' || (i % 3), 'job' || (i % 50), 'k' || i, 0,
			CASE WHEN i % 97 = 0 THEN 'failed' WHEN i % 89 = 0 THEN 'running' WHEN i % 83 = 0 THEN 'queued' ELSE 'completed' END,
			1, 'a', 0, 0, 'h', x'', 1, '', ? + (i / 2) * 1000000, ? + ((i * 7919) % 30000) * 1000000, 0, ? + 86400000000
		FROM g`, micros(base), micros(base), micros(time.Now())); err != nil {
		t.Fatal(err)
	}
	hour := base.Add(2 * time.Hour)
	for _, c := range []struct {
		p ledger.ListParams
		// sort is the sort the plan may have: "" none; "merge" only the merge's, of
		// each status's page (a limited subquery); "rows" one over a status's rows.
		sort string
	}{
		{ledger.ListParams{}, ""},
		{ledger.ListParams{Status: ledger.StatusFailed}, "rows"},
		{ledger.ListParams{Status: ledger.StatusCompleted}, ""},
		{ledger.ListParams{Job: "job7"}, ""},
		{ledger.ListParams{Namespace: "ns1"}, ""},
		{ledger.ListParams{Status: ledger.StatusFailed, Job: "job7"}, "rows"},
		{ledger.ListParams{CreatedAfter: hour, CreatedBefore: time.Now()}, ""},
		{ledger.ListParams{UpdatedAfter: hour}, "merge"},
		{ledger.ListParams{UpdatedAfter: hour, Status: ledger.StatusRunning}, ""},
		{ledger.ListParams{UpdatedAfter: hour, Job: "job7"}, "merge"},
		{ledger.ListParams{Status: ledger.StatusCompleted, UpdatedAfter: hour, UpdatedBefore: time.Now()}, ""},
	} {
		t.Run(fmt.Sprintf("%+v", c.p), func(t *testing.T) {
			p := c.p
			size, pos := driver.ListPage(&p)
			q, args, err := l.listQuery(ctx, &p, pos, size+1)
			if err != nil {
				t.Fatal(err)
			}
			plan := explain(t, l, q, args...)
			text := strings.Join(plan, "\n")
			var rowSorts, pageSorts int
			for i, step := range plan {
				switch {
				case !strings.Contains(step, "TEMP B-TREE"):
				case i > 0 && strings.HasPrefix(plan[i-1], "SCAN (subquery-"):
					pageSorts++
				default:
					rowSorts++
				}
			}
			wantRowSorts, wantPageSorts := 0, 0
			switch c.sort {
			case "rows":
				wantRowSorts = 1
			case "merge":
				wantPageSorts = len(ledger.Statuses())
			}
			if slices.Contains(plan, "SCAN runs") || !strings.Contains(text, "USING INDEX runs_") ||
				rowSorts != wantRowSorts || pageSorts != wantPageSorts {
				t.Errorf("plan of %s:\n%s\nwant the listing's indexes, no scan of the table, %d sorts of rows and %d of pages",
					q, text, wantRowSorts, wantPageSorts)
			}
			checkPages(t, l, c.p)
		})
	}
	t.Run("ListRunIDs", func(t *testing.T) {
		// The 30,000 IDs are printf('%064x', i): 0…0753 is one of them, 0…075 the
		// prefix of 0…0750 to 0…075f.
		lo, hi := ledger.RunIDRange(strings.Repeat("0", 61) + "75")
		plan := strings.Join(explain(t, l, listRunIDsSQL, lo, hi, 10), "\n")
		if plan != "SEARCH runs USING COVERING INDEX sqlite_autoindex_runs_1 (run_id>? AND run_id<?)" {
			t.Errorf("plan of ListRunIDs:\n%s\nwant a range of the primary key's index alone", plan)
		}
		ids, err := l.ListRunIDs(ctx, &ledger.ListRunIDsParams{Prefix: strings.Repeat("0", 61) + "75", Limit: 20})
		if err != nil || len(ids) != 16 || ids[0] != fmt.Sprintf("%064x", 0x750) || ids[15] != fmt.Sprintf("%064x", 0x75f) {
			t.Errorf("ListRunIDs(0…075) = %v, %v; want the 16 IDs 0…0750 to 0…075f", ids, err)
		}
	})
}

// explain returns the details of the query plan of q.
func explain(t *testing.T, l *Ledger, q string, args ...any) []string {
	t.Helper()
	rows, err := l.db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// checkPages pages through the first listPages pages of List(p), ledger.MaxPageSize runs
// a page (all of them when there are fewer), and compares the IDs with the matching runs
// sorted newest first by the listing's time. More pages would only repeat the keyset
// step, which the conformance suite covers, and take a minute under -race.
func checkPages(t *testing.T, l *Ledger, p ledger.ListParams) {
	t.Helper()
	ctx := t.Context()
	col, after, before := p.TimeRange()
	q := "SELECT run_id, " + col + " FROM runs WHERE 1"
	var args []any
	for _, f := range []struct {
		ok   bool
		cond string
		v    any
	}{
		{p.Status != "", "status = ?", string(p.Status)}, {p.Job != "", "job = ?", p.Job},
		{p.Namespace != "", "namespace = ?", p.Namespace},
		{!after.IsZero(), col + " >= ?", micros(driver.Micros(after))}, {!before.IsZero(), col + " < ?", micros(driver.Micros(before))},
	} {
		if f.ok {
			q += " AND " + f.cond
			args = append(args, f.v)
		}
	}
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		id string
		at int64
	}
	var want []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.id, &k.at); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	rows.Close()
	slices.SortFunc(want, func(a, b key) int { return cmp.Or(cmp.Compare(b.at, a.at), strings.Compare(b.id, a.id)) })
	var got []string
	p.PageSize = ledger.MaxPageSize
	for range listPages {
		res, err := l.List(ctx, &p)
		if err != nil {
			t.Fatalf("List(%+v): %v", p, err)
		}
		for _, r := range res.Runs {
			got = append(got, r.ID)
		}
		if res.Next == "" {
			break
		}
		p.Cursor = res.Next
	}
	if len(want) == 0 {
		t.Fatalf("no run matches %+v: the test's data does not reach this shape", p)
	}
	want = want[:min(len(want), listPages*ledger.MaxPageSize)]
	wantIDs := make([]string, len(want))
	for i, k := range want {
		wantIDs[i] = k.id
	}
	if !slices.Equal(got, wantIDs) {
		t.Errorf("List pages hold %d runs, first %v; want %d, first %v", len(got), got[:min(3, len(got))], len(wantIDs), wantIDs[:min(3, len(wantIDs))])
	}
}

// listPages is how many pages checkPages reads.
const listPages = 3
