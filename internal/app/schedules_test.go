package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/schedule"
	"github.com/runonce/runonce/pkg/ticks"
)

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// missedCounter returns a meter and a function that reads its missed-tick counter.
func missedCounter() (*sdkmetric.MeterProvider, func(t *testing.T) int64) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	return mp, func(t *testing.T) int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == ticks.MetricMissed {
					for _, dp := range sum.DataPoints {
						n += dp.Value
					}
				}
			}
		}
		return n
	}
}

// schedLedgers opens one ledger per replica: each its own connection to PostgreSQL
// (TEST_DATABASE_URL), or else one SQLite file shared.
func schedLedgers(t *testing.T, n int) []*ledger.Ledger {
	t.Helper()
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" && os.Getenv("CI") == "true" {
		t.Fatal("TEST_DATABASE_URL is not set under CI=true: start the services (scripts/services.sh)")
	}
	var shared *ledger.Ledger
	out := make([]*ledger.Ledger, n)
	for i := range out {
		var l *ledger.Ledger
		var err error
		switch {
		case dsn != "":
			l, err = ledger.Open(t.Context(), dsn)
		case shared != nil:
			out[i] = shared
			continue
		default:
			d, derr := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "runonce.db"), nil)
			l, err = ledger.New(d, nil), derr
			shared = l
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		out[i] = l
	}
	return out
}

// replica is one ingress process with -schedule: its handler, served, and its loops.
type replica struct {
	h    *ingress.Handler
	srv  *httptest.Server
	stop func()
}

// TestScheduleReplicasAuditBackfill is the whole of "Knowing the schedule" on one
// controlled clock: three ingress replicas with -schedule (each its own book, ledger
// connection and loops, as newTickLoops wires them) make exactly one run per tick; while
// they are stopped for three ticks, a worker's checker counts the three missed ticks once
// each; the audit shows them missing; backfill claims them under the scheduler's run IDs,
// so a late scheduler delivery of one is a duplicate; a run started by hand is keyed
// apart and listed as such.
func TestScheduleReplicasAuditBackfill(t *testing.T) {
	ctx := t.Context()
	job := fmt.Sprintf("every-%d", time.Now().UnixNano())
	js, err := jobs.Parse(strings.NewReader(`{"jobs": {"` + job + `": {"schedule": "* * * * *", "missed_after": "30s"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ns := "ns-" + job
	t0 := time.Now().UTC().Truncate(time.Minute)
	tick := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	clk := &testClock{t: tick(0).Add(10 * time.Second)}
	ps, err := pubsubtest.NewInProcess(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	t.Cleanup(func() { pub.Close() })
	log := slog.New(slog.DiscardHandler)
	newBook := func() *ticks.Book {
		b, err := ticks.NewBook(ctx, js, &ticks.BookOptions{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	start := func(l *tickLoops) func() {
		lctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.run(lctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("tick loops: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}
	leds := schedLedgers(t, 4)
	var replicas []*replica
	for i := range 3 {
		book := newBook()
		h, err := ingress.New(&ingress.Config{Ledger: leds[i], Publisher: pub, Namespace: ns, Auth: auth.None{}, Operators: auth.None{},
			Jobs: jobs.Names(js), Schedules: book, Now: clk.Now, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		loops, err := newTickLoops(&tickConfig{Book: book, Ledger: leds[i], Namespace: ns, Fire: fireThrough(h), Log: log,
			Now: clk.Now, Poll: 2 * time.Millisecond, CheckEvery: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		replicas = append(replicas, &replica{h: h, srv: srv, stop: start(loops)})
	}
	// The worker's checker: no scheduler, its own meter.
	mp, missed := missedCounter()
	wloops, err := newTickLoops(&tickConfig{Book: newBook(), Ledger: leds[3], Namespace: ns, Meter: mp.Meter(tickMeter), Log: log,
		Now: clk.Now, CheckEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(wloops)

	runsOfJob := func() map[string]*ledger.Run {
		t.Helper()
		res, err := leds[3].List(ctx, &ledger.ListParams{Job: job, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*ledger.Run{}
		for _, r := range res.Runs {
			if r.Namespace == ns {
				out[r.ID] = r
			}
		}
		return out
	}
	spec, err := newBook().Spec(job)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	// Ticks 0 to 2, fired by three replicas: one run each.
	for i := range 3 {
		clk.Set(tick(i).Add(10 * time.Second))
		waitUntil(fmt.Sprintf("the run of tick %d", i), func() bool {
			_, err := leds[3].Get(ctx, &ledger.GetParams{RunID: spec.RunID(ns, tick(i))})
			return err == nil
		})
	}
	time.Sleep(50 * time.Millisecond) // the other replicas' fires of tick 2 land as duplicates
	if got := runsOfJob(); len(got) != 3 {
		t.Fatalf("%d runs after three ticks fired by three replicas, want 3: %v", len(got), got)
	}

	// The replicas stop for ticks 3 to 5; the worker's checker sees each grace run out.
	for _, r := range replicas {
		r.stop()
	}
	for s := 20; s <= 3*60+40; s += 20 { // to tick 5 and its grace of 30s
		clk.Set(tick(2).Add(time.Duration(s) * time.Second))
		time.Sleep(15 * time.Millisecond)
	}
	waitUntil("three missed ticks counted", func() bool { return missed(t) >= 3 })
	time.Sleep(50 * time.Millisecond)
	if n := missed(t); n != 3 {
		t.Fatalf("%s counted %d missed ticks, want 3 (ticks 3, 4, 5)", ticks.MetricMissed, n)
	}

	c := &client.Client{BaseURL: replicas[0].srv.URL}
	q := url.Values{"from": {tick(0).Format(time.RFC3339)}, "to": {tick(6).Format(time.RFC3339)}}
	audit, err := c.Ticks(ctx, job, q)
	if err != nil {
		t.Fatal(err)
	}
	statuses := func(a *api.TicksJSON) string {
		var s []string
		for _, row := range a.Ticks {
			s = append(s, string(row.Status))
		}
		return strings.Join(s, " ")
	}
	if got, want := statuses(audit), "queued queued queued missing missing missing"; got != want || audit.Missing != 3 {
		t.Fatalf("audit: %q (missing %d), want %q", got, audit.Missing, want)
	}

	bf, err := c.Backfill(ctx, job, &api.BackfillRequest{From: tick(0), To: tick(6)})
	if err != nil {
		t.Fatal(err)
	}
	if bf.Claimed != 3 || len(bf.Ticks) != 3 || !bf.Ticks[0].Tick.Equal(tick(3)) || bf.Ticks[0].RunID != spec.RunID(ns, tick(3)) {
		t.Fatalf("backfill: %+v, want ticks 3 to 5 claimed under their scheduler run IDs", bf)
	}
	// Cloud Scheduler's late delivery of tick 4: a duplicate of its backfilled run.
	req, _ := http.NewRequest(http.MethodPost, replicas[1].srv.URL+"/v1/jobs/"+job, nil)
	req.Header.Set(ingress.HeaderSchedulerJobName, job)
	req.Header.Set(ingress.HeaderSchedulerScheduleTime, tick(4).Format(time.RFC3339))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var late api.Response
	err = json.NewDecoder(resp.Body).Decode(&late)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || !late.Duplicate || late.RunID != spec.RunID(ns, tick(4)) {
		t.Fatalf("the late delivery of tick 4: %d %+v (%v), want 202, a duplicate of run %s", resp.StatusCode, late, err, spec.RunID(ns, tick(4)))
	}
	manual, err := c.RunJob(ctx, job, &api.RunRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(manual.Key, ingress.ManualKeyPrefix) {
		t.Fatalf("a run by hand got key %q, want %s…", manual.Key, ingress.ManualKeyPrefix)
	}
	if got := runsOfJob(); len(got) != 7 {
		t.Fatalf("%d runs, want 7 (six ticks and one by hand)", len(got))
	}
	audit, err = c.Ticks(ctx, job, q)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := statuses(audit), "queued queued queued queued queued queued"; got != want || audit.Missing != 0 {
		t.Fatalf("audit after backfill: %q, want %q", got, want)
	}
	if len(audit.Unmatched) != 1 || audit.Unmatched[0].RunID != manual.RunID || audit.Unmatched[0].Reason != schedule.ReasonKeyed {
		t.Fatalf("unmatched: %+v, want the run by hand, keyed", audit.Unmatched)
	}
}
