package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// TestListingPlansUseIndexes checks, on 30,000 analysed runs, that every shape of
// listing reads an index in the newest-first order it pages in, rather than scanning
// the table: migration 0007 left two listing indexes for all of them.
func TestListingPlansUseIndexes(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	runs := pgx.Identifier{l.Schema(), "runs"}.Sanitize()
	// Mostly completed runs of 50 jobs in 3 namespaces; a few failed, running, queued.
	if _, err := l.pool.Exec(ctx, `INSERT INTO `+runs+` (run_id, namespace, job, run_key, payload_hash, status,
		created_at, updated_at, expire_at)
	SELECT 'r' || g, 'ns' || (g % 3), 'job' || (g % 50), 'k' || g, 'h',
		CASE WHEN g % 97 = 0 THEN 'failed' WHEN g % 89 = 0 THEN 'running' WHEN g % 83 = 0 THEN 'queued' ELSE 'completed' END,
		now() - g * interval '1 second', now() - g * interval '1 second' + interval '5 seconds', now() + interval '1 day'
	FROM generate_series(1, 30000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.pool.Exec(ctx, `ANALYZE `+runs); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	for _, p := range []ledger.ListParams{
		{},
		{Status: ledger.StatusFailed},
		{Status: ledger.StatusCompleted},
		{Job: "job7"},
		{Namespace: "ns1"},
		{Status: ledger.StatusFailed, Job: "job7"},
		{UpdatedAfter: hour},
		{UpdatedAfter: hour, Status: ledger.StatusRunning},
		{UpdatedAfter: hour, Job: "job7"},
		{CreatedAfter: hour, CreatedBefore: time.Now()},
	} {
		t.Run(fmt.Sprintf("%+v", p), func(t *testing.T) {
			size, pos := driver.ListPage(&p)
			q, args := l.listQuery(&p, pos, size+1)
			rows, err := l.pool.Query(ctx, "EXPLAIN "+q, args...)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "runs_") {
				t.Errorf("plan of %s:\n%s\nwant index scans of the listing's indexes, no sequential scan", q, text)
			}
			res, err := l.List(ctx, &p)
			if err != nil || len(res.Runs) == 0 {
				t.Fatalf("List = %d runs, %v; want a page", len(res.Runs), err)
			}
		})
	}
}
