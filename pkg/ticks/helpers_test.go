package ticks_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/firestoreledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	_ "github.com/runonce/runonce/pkg/ledger/redisledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/ticks"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if spannerAdmin.client != nil {
		_ = spannerAdmin.client.Close()
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
			goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// backend is a ledger the reader is tested on.
type backend struct {
	name string
	// open returns a ledger; clock, when the backend takes one, is its clock.
	open func(tb testing.TB, clock func() time.Time) ledger.Driver
	// realTime: the backend keeps its own clock (a service's), not clock.
	realTime bool
}

// backends are the embedded ones, and those on the services whose environment is set
// (under CI=true every one must be).
func backends(t *testing.T) []backend {
	out := []backend{
		{name: "memory", open: func(tb testing.TB, clock func() time.Time) ledger.Driver {
			return memory.New(&memory.Options{Clock: clock})
		}},
		{name: "sqlite", open: func(tb testing.TB, clock func() time.Time) ledger.Driver {
			l, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "runonce.db"), &sqlite.Options{Clock: clock})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { l.Close() })
			return l
		}},
	}
	for _, s := range []struct{ name, env, url string }{
		{"postgres", "TEST_DATABASE_URL", os.Getenv("TEST_DATABASE_URL")},
		{"redis", "TEST_REDIS_URL", os.Getenv("TEST_REDIS_URL") + "?prefix=ticks" + unique() + ":"},
		{"firestore", "FIRESTORE_EMULATOR_HOST", "firestore://runonce-test?prefix=ticks" + unique() + "_"},
		{"spanner", "SPANNER_EMULATOR_HOST", ""},
	} {
		if os.Getenv(s.env) == "" {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not set under CI=true: start the services (scripts/services.sh)", s.env)
			}
			t.Logf("%s not set: the reader is not tested on %s", s.env, s.name)
			continue
		}
		out = append(out, backend{name: s.name, realTime: true, open: func(tb testing.TB, _ func() time.Time) ledger.Driver {
			if s.name == "spanner" {
				return openSpanner(tb)
			}
			l, err := ledger.OpenDriver(context.Background(), s.url)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { l.Close() })
			return l
		}})
	}
	return out
}

var seq atomic.Int64

// unique is a suffix that keeps tests on a shared service apart.
func unique() string {
	return fmt.Sprintf("%d%d", time.Now().UnixNano()%1_000_000_000, seq.Add(1))
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// book reads a jobs file from text and returns its book.
func book(t *testing.T, file string, o *ticks.BookOptions) *ticks.Book {
	t.Helper()
	js, err := jobs.Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if o == nil {
		o = &ticks.BookOptions{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := ticks.NewBook(t.Context(), js, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// claimTick claims the run of a tick as the scheduler's delivery would, in ns.
func claimTick(t *testing.T, l ledger.Driver, ns, job, schedulerJob string, tick time.Time, now time.Time) *ledger.Run {
	t.Helper()
	id := ledger.Identity{RunID: ledger.ScheduledRunID(ns, job, schedulerJob, tick), Namespace: ns, Job: job, Key: schedulerJob,
		ScheduleTime: tick, PayloadHash: ledger.PayloadHash(nil)}
	res, err := l.Claim(t.Context(), &ledger.ClaimParams{Identity: id, AttemptID: "claim-" + unique(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return res.Run
}

// claimKeyed claims a run keyed by key, in ns.
func claimKeyed(t *testing.T, l ledger.Driver, ns, job, key string, now time.Time) *ledger.Run {
	t.Helper()
	id := ledger.Identity{RunID: ledger.KeyedRunID(ns, job, key), Namespace: ns, Job: job, Key: key, PayloadHash: ledger.PayloadHash(nil)}
	res, err := l.Claim(t.Context(), &ledger.ClaimParams{Identity: id, AttemptID: "claim-" + unique(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return res.Run
}

// logs is a JSON logger into a buffer.
func logs() (*slog.Logger, *syncbuf.Buffer) {
	var buf syncbuf.Buffer
	return logsInto(&buf), &buf
}

func logsInto(buf *syncbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// meter returns a meter and a function that reads the missed-tick counter by job.
func meter() (*sdkmetric.MeterProvider, func(t *testing.T) map[string]int64) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	return mp, func(t *testing.T) map[string]int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == ticks.MetricMissed {
					for _, dp := range sum.DataPoints {
						j, _ := dp.Attributes.Value("job")
						out[j.AsString()] += dp.Value
					}
				}
			}
		}
		return out
	}
}
