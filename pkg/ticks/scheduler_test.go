package ticks_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/ticks"
)

// fired records the ticks a scheduler's FireFunc claimed, in the order it claimed them.
type fired struct {
	l       ledger.Driver
	ns      string
	mu      sync.Mutex
	calls   map[string][]time.Time // by job, every call
	created map[string]int         // by run ID
	fail    map[time.Time]int      // a tick's first calls that fail
}

func newFired(l ledger.Driver, ns string) *fired {
	return &fired{l: l, ns: ns, calls: map[string][]time.Time{}, created: map[string]int{}, fail: map[time.Time]int{}}
}

// fire claims the tick as the ingress does, keyed by the spec's scheduler job name.
func (f *fired) fire(ctx context.Context, spec *ticks.Spec, tick time.Time) (string, bool, error) {
	f.mu.Lock()
	f.calls[spec.Job] = append(f.calls[spec.Job], tick)
	if f.fail[tick] > 0 {
		f.fail[tick]--
		f.mu.Unlock()
		return "", false, errors.New("the ledger is unavailable")
	}
	f.mu.Unlock()
	id := spec.RunID(f.ns, tick)
	res, err := f.l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Namespace: f.ns, Job: spec.Job, Key: spec.SchedulerJob,
		ScheduleTime: tick, PayloadHash: ledger.PayloadHash(nil)}, AttemptID: "a"})
	if err != nil {
		return "", false, err
	}
	if res.Created {
		f.mu.Lock()
		f.created[id]++
		f.mu.Unlock()
	}
	return id, res.Created, nil
}

func (f *fired) callsOf(job string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls[job]...)
}

// startScheduler runs a scheduler until the test ends.
func startScheduler(t *testing.T, b *ticks.Book, f *fired, now func() time.Time, log *syncbuf.Buffer) {
	t.Helper()
	var discard syncbuf.Buffer
	if log == nil {
		log = &discard
	}
	lg := logsInto(log)
	s, err := ticks.NewScheduler(&ticks.SchedulerConfig{Book: b, Fire: f.fire, Poll: 2 * time.Millisecond, Now: now, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scheduler: %v", err)
		}
	})
}

// waitFor waits until cond holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func minute(h, m int) time.Time { return time.Date(2026, 5, 4, h, m, 0, 0, time.UTC) }

// TestSchedulerReplicasMakeOneRunPerTick: three schedulers firing the same jobs file's
// schedule at the same time, concurrently, make exactly one run of each tick; the others
// are duplicates.
func TestSchedulerReplicasMakeOneRunPerTick(t *testing.T) {
	t.Parallel()
	clk := newClock(minute(12, 0).Add(30 * time.Second))
	l := memory.New(&memory.Options{Clock: clk.Now})
	b := book(t, `{"jobs": {"every": {"schedule": "* * * * *"}}}`, nil)
	f := newFired(l, "ns")
	for range 3 {
		startScheduler(t, b, f, clk.Now, nil)
	}
	for m := 0; m <= 3; m++ {
		if m > 0 {
			clk.Set(minute(12, m).Add(time.Duration(m) * time.Second))
		}
		waitFor(t, "three fires of each tick", func() bool { return len(f.callsOf("every")) == 3*(m+1) })
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.created) != 4 {
		t.Fatalf("%d runs created, want one per tick (4): %v", len(f.created), f.created)
	}
	for m := 0; m <= 3; m++ {
		id := ledger.ScheduledRunID("ns", "every", "every", minute(12, m))
		if f.created[id] != 1 {
			t.Errorf("tick 12:0%d: created %d times, want once", m, f.created[id])
		}
	}
}

// TestSchedulerCatchesUpOldestFirst: after a start, a job fires the ticks of its last
// catch_up, oldest first, and one without catch_up only a tick at most a minute late; a
// failed fire is retried; a clock that jumps skips the ticks later than the catch_up,
// saying so.
func TestSchedulerCatchesUpOldestFirst(t *testing.T) {
	t.Parallel()
	clk := newClock(minute(12, 10).Add(30 * time.Second))
	l := memory.New(&memory.Options{Clock: clk.Now})
	b := book(t, `{"jobs": {"late": {"schedule": "* * * * *", "catch_up": "5m"}, "plain": {"schedule": "* * * * *"}}}`, nil)
	f := newFired(l, "")
	f.fail[minute(12, 11)] = 1
	var buf syncbuf.Buffer
	startScheduler(t, b, f, clk.Now, &buf)
	ticksOf := func(from, to int) []time.Time {
		var out []time.Time
		for m := from; m <= to; m++ {
			out = append(out, minute(12, m))
		}
		return out
	}
	waitFor(t, "the catch-up", func() bool { return len(f.callsOf("late")) == 5 && len(f.callsOf("plain")) == 1 })
	if diff := cmp.Diff(ticksOf(6, 10), f.callsOf("late")); diff != "" {
		t.Errorf("late's catch-up (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ticksOf(10, 10), f.callsOf("plain")); diff != "" {
		t.Errorf("plain (no catch_up) (-want +got):\n%s", diff)
	}
	clk.Set(minute(12, 11).Add(10 * time.Second))
	// 12:11 fails once for each job's first call, then is retried.
	waitFor(t, "12:11", func() bool { return len(f.callsOf("late"))+len(f.callsOf("plain")) == 5+1+2+1 })
	clk.Set(minute(12, 20).Add(30 * time.Second))
	waitFor(t, "the jump", func() bool { return len(f.callsOf("late")) == 7+5 && len(f.callsOf("plain")) == 3 })
	if diff := cmp.Diff(ticksOf(16, 20), f.callsOf("late")[7:]); diff != "" {
		t.Errorf("late after the jump (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ticksOf(20, 20), f.callsOf("plain")[2:]); diff != "" {
		t.Errorf("plain after the jump (-want +got):\n%s", diff)
	}
	// Each job logs its skipped ticks once it has fired the next one.
	waitFor(t, "the skip warnings", func() bool { return strings.Count(buf.String(), "ticks skipped") == 2 })
	skipped := map[string]int{}
	retries := 0
	for line := range strings.Lines(buf.String()) {
		var e struct {
			Level, Msg, Job string
			Ticks           int
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(e.Msg, "ticks skipped") && e.Level == "WARN":
			skipped[e.Job] += e.Ticks
		case strings.HasPrefix(e.Msg, "tick not fired yet"):
			retries++
		}
	}
	if !cmp.Equal(skipped, map[string]int{"late": 4, "plain": 8}) || retries != 1 {
		t.Errorf("skipped %v (want late 4: 12:12-12:15, plain 8: 12:12-12:19), %d retry lines (want 1):\n%s", skipped, retries, buf.String())
	}
}
