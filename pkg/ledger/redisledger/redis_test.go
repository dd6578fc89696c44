package redisledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/ledgertest"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

// testURL returns TEST_REDIS_URL. It skips the test when the variable is unset, and fails
// it under CI=true.
func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TEST_REDIS_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("TEST_REDIS_URL is unset under CI=true: scripts/services.sh must start Redis")
		}
		tb.Skip("set TEST_REDIS_URL to run against Redis (eval \"$(scripts/services.sh start DIR)\")")
	}
	return u
}

// newPrefix returns a fresh key prefix and deletes its keys in tb.Cleanup.
func newPrefix(tb testing.TB, rdb *redis.Client) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "ledgertest:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				tb.Errorf("delete the keys of %s: %v", prefix, err)
			}
		}
	})
	return prefix
}

var shared struct {
	once sync.Once
	rdb  *redis.Client
	err  error
}

// sharedClient is one client for the tests' ledgers, with a pool large enough for the
// suite's 64 contenders.
func sharedClient(tb testing.TB) *redis.Client {
	tb.Helper()
	raw := testURL(tb)
	shared.once.Do(func() {
		o, err := redis.ParseURL(raw)
		if err != nil {
			shared.err = err
			return
		}
		o.PoolSize = 80
		shared.rdb = redis.NewClient(o)
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.rdb
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.rdb != nil {
		_ = shared.rdb.Close()
	}
	os.Exit(code)
}

// openTest opens a ledger on a fresh prefix of the shared server.
func openTest(tb testing.TB, opts *Options) *Ledger {
	tb.Helper()
	rdb := sharedClient(tb)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = newPrefix(tb, rdb)
	}
	l, err := New(tb.Context(), rdb, &o)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return l
}

func harness() ledgertest.Harness {
	return ledgertest.Harness{
		Open: func(tb testing.TB) ledger.Driver { return openTest(tb, nil) },
		// The backend reads no process clock at all (every time is the server's TIME), so
		// a "skewed" client is another client of the same keys: the suite checks that a
		// second client's decisions are the server's.
		SkewedClient: func(tb testing.TB, l ledger.Driver, _ func() time.Duration) ledger.Driver {
			tb.Helper()
			other, err := Open(tb.Context(), testURL(tb)+"?prefix="+url.QueryEscape(l.(*Ledger).Prefix()), nil)
			if err != nil {
				tb.Fatalf("Open a second client: %v", err)
			}
			tb.Cleanup(func() { _ = other.Close() })
			return other
		},
		SupportsNow: true,
		Operations:  true,
	}
}

func TestConformance(t *testing.T) { ledgertest.Run(t, harness()) }

func BenchmarkLedger(b *testing.B) { ledgertest.Benchmark(b, harness()) }

func TestURL(t *testing.T) {
	t.Parallel()
	raw := testURL(t)
	ctx := t.Context()
	t.Run("Open", func(t *testing.T) {
		prefix := newPrefix(t, sharedClient(t))
		l, err := ledger.Open(ctx, raw+"?prefix="+url.QueryEscape(prefix)+"&grace=2h&dial_timeout=3s")
		if err != nil {
			t.Fatalf("ledger.Open: %v", err)
		}
		defer l.Close()
		rl := l.Driver().(*Ledger)
		if rl.Prefix() != prefix || rl.o.Grace != 2*time.Hour {
			t.Fatalf("prefix %q, grace %v; want %q, 2h", rl.Prefix(), rl.o.Grace, prefix)
		}
		if err := l.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: ledger.KeyedRunID("u", "j", "k")}, AttemptID: "a"}); err != nil {
			t.Fatalf("Claim through a URL-opened ledger: %v", err)
		}
	})
	for _, bad := range []struct{ query, want string }{
		{"persistence=maybe", "persistence"},
		{"eviction=maybe", "eviction"},
		{"wait=-1", "wait"},
		{"grace=soon", "grace"},
		{"prefix=a&prefix=b", "prefix"},
		{"no_such_option=1", "no_such_option"},
	} {
		t.Run(bad.query, func(t *testing.T) {
			_, err := ledger.Open(ctx, raw+"?"+bad.query)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("Open with %s: error = %v, want one naming %s", bad.query, err, bad.want)
			}
		})
	}
	t.Run("Unreachable", func(t *testing.T) {
		for _, scheme := range []string{"redis", "rediss"} {
			_, err := ledger.Open(ctx, scheme+"://127.0.0.1:1/0?dial_timeout=1s&max_retries=-1")
			if !errors.Is(err, ledger.ErrUnavailable) {
				t.Fatalf("Open of an unreachable %s:// server = %v, want ledger.ErrUnavailable", scheme, err)
			}
		}
	})
}

// TestWaitForReplicas: with wait=1 on a server without replicas, a write happens on the
// primary and is answered ErrUnavailable, saying so; the retry is safe (an idempotent
// repeat).
func TestWaitForReplicas(t *testing.T) {
	t.Parallel()
	l := openTest(t, &Options{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	id := ledger.KeyedRunID("wait", "job", uuid.NewString())
	p := &ledger.ClaimParams{Identity: ledger.Identity{RunID: id}, AttemptID: uuid.NewString()}
	_, err := l.Claim(t.Context(), p)
	if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("Claim with wait=1 and no replica = %v, want ErrUnavailable naming the replicas", err)
	}
	l.o.WaitReplicas = 0
	res, err := l.Claim(t.Context(), p)
	if err != nil || !res.Created {
		t.Fatalf("the retried claim = %+v, %v; want it created (the first try's own record)", res, err)
	}
}

// TestRFC3339 checks the scripts' time formatting against Go's, through a takeover's
// lost-lease error, for deadlines with and without fractions of a second.
func TestRFC3339(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	for _, at := range []time.Time{
		time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC),
		time.Date(2000, 2, 29, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 12, 31, 0, 0, 0, 100000000, time.UTC),
		time.Date(1999, 1, 1, 0, 0, 0, 1000, time.UTC),
	} {
		id := ledger.KeyedRunID("fmt", "job", uuid.NewString())
		a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id}, AttemptID: "one", Lease: time.Second, Now: at.Add(-time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id}, AttemptID: "two", Now: at.Add(time.Second)})
		if err != nil || b.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("takeover = %+v, %v", b, err)
		}
		want := fmt.Sprintf("attempt 1 lost its lease at %s", a.Run.Deadline.Format(time.RFC3339Nano))
		if b.Run.LastError != want {
			t.Fatalf("LastError = %q, want %q", b.Run.LastError, want)
		}
	}
}

// TestKeysExpireAfterTheGrace: Redis deletes a record by itself once its ExpireAt and the
// grace have passed, with no sweep.
func TestKeysExpireAfterTheGrace(t *testing.T) {
	t.Parallel()
	l := openTest(t, &Options{Grace: time.Millisecond})
	ctx := t.Context()
	id := ledger.KeyedRunID("ttl", "job", uuid.NewString())
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id}, AttemptID: "a", Retention: 200 * time.Millisecond, PickupTimeout: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ttl, err := l.rdb.PTTL(ctx, l.runKey(id)).Result()
	if err != nil || ttl <= 0 || ttl > time.Second {
		t.Fatalf("PTTL of the run = %v, %v; want about 200ms", ttl, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := l.Get(ctx, &ledger.GetParams{RunID: id})
		if errors.Is(err, ledger.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is still there 5s after its expiry: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// server is a private redis-server the restart tests start, kill and start again.
type server struct {
	t    *testing.T
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
}

func startServer(t *testing.T, persistence ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed under CI=true: scripts/test.sh installs it")
		}
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &server{t: t, dir: t.TempDir(), port: port}
	s.args = append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", s.dir, "--save", ""}, persistence...)
	s.start(bin)
	t.Cleanup(s.kill)
	return s
}

func (s *server) start(bin string) {
	s.t.Helper()
	s.out = &syncbuf.Buffer{}
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer rdb.Close()
	for i := 0; ; i++ {
		if err := rdb.Ping(s.t.Context()).Err(); err == nil {
			return
		} else if i > 100 {
			s.t.Fatalf("redis-server did not answer: %v\n%s", err, s.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crash kills the server with SIGKILL (no shutdown, no final save) and starts it again on
// the same directory and port.
func (s *server) crash() {
	s.t.Helper()
	s.kill()
	s.start(s.cmd.Path)
}

func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }
func (s *server) url() string  { return "redis://" + s.addr() + "/0" }

// TestRestartWithPersistenceLosesNothing claims, acquires, begins and completes an effect
// and completes a run on a server with the documented configuration (appendonly yes,
// appendfsync always), kills it with SIGKILL and starts it again: every record is there,
// a duplicate claim is answered with the first, and the done effect is skipped.
func TestRestartWithPersistenceLosesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := t.Context()
	l, err := Open(ctx, s.url(), nil)
	if err != nil {
		t.Fatalf("Open on a durable server: %v", err)
	}
	defer l.Close()
	claimed, running := ledger.KeyedRunID("restart", "job", uuid.NewString()), ledger.KeyedRunID("restart", "job", uuid.NewString())
	c, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: claimed, PayloadHash: "h"}, AttemptID: "ingress"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: running}, AttemptID: "worker", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := ledger.Fence{RunID: running, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	if _, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: f, Name: "charge"}); err != nil {
		t.Fatal(err)
	}

	s.crash()

	again, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: claimed, PayloadHash: "h"}, AttemptID: "retry"})
	if err != nil || again.Created || again.Run.AttemptID != c.Run.AttemptID {
		t.Fatalf("duplicate claim after the restart = %+v, %v; want the first claim's run", again, err)
	}
	got, err := l.Get(ctx, &ledger.GetParams{RunID: running})
	if err != nil || got.Status != ledger.StatusRunning || got.AttemptID != "worker" {
		t.Fatalf("running run after the restart = %+v, %v; want held by the worker", got, err)
	}
	res, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"})
	if err != nil || !res.Done {
		t.Fatalf("BeginEffect of the done effect after the restart = %+v, %v; want done (skipped)", res, err)
	}
	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f}); err != nil {
		t.Fatalf("Complete after the restart (the scripts reloaded through EVAL): %v", err)
	}
}

// TestPersistenceOff: Open refuses a server without an append-only file, or warns with
// persistence=warn; and such a server, killed and started again, has forgotten the claim,
// so that the duplicate creates the run anew: the duplicate would run.
func TestPersistenceOff(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--appendonly", "no")
	ctx := t.Context()
	_, err := Open(ctx, s.url(), nil)
	if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "appendonly") {
		t.Fatalf("Open on a server without persistence = %v, want ErrNotDurable naming appendonly", err)
	}
	var logs bytes.Buffer
	l, err := Open(ctx, s.url()+"?persistence=warn", &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open with persistence=warn: %v", err)
	}
	defer l.Close()
	if !strings.Contains(logs.String(), "appendonly is off") {
		t.Fatalf("persistence=warn logged %q, want a warning that appendonly is off", logs.String())
	}
	id := ledger.KeyedRunID("off", "job", uuid.NewString())
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id}, AttemptID: "first"}); err != nil {
		t.Fatal(err)
	}
	s.crash()
	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id}, AttemptID: "duplicate"})
	if err != nil || !res.Created {
		t.Fatalf("claim after a restart without persistence = %+v, %v; the server forgot the first claim, so this one creates it", res, err)
	}
}

// TestFsyncWarning: appendfsync everysec opens with a warning.
func TestFsyncWarning(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
	var logs bytes.Buffer
	l, err := Open(t.Context(), s.url(), &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open with appendfsync everysec: %v", err)
	}
	defer l.Close()
	if !strings.Contains(logs.String(), "appendfsync is everysec") {
		t.Fatalf("logged %q, want a warning about appendfsync", logs.String())
	}
}

// rawClaim is the limit the new-run claim is compared with: one HSET of the same fields,
// without the script, the indexes or the expiry.
func rawClaim(ctx context.Context, rdb *redis.Client, prefix string, id ledger.Identity) error {
	now := strconv.FormatInt(time.Now().UnixMicro(), 10)
	return rdb.HSet(ctx, prefix+"raw:"+id.RunID, "id", id.RunID, "namespace", id.Namespace, "job", id.Job, "key", id.Key,
		"schedule_time", timeArg(id.ScheduleTime), "payload_hash", id.PayloadHash, "payload", id.Payload,
		"status", "queued", "attempt", "0", "attempt_id", uuid.NewString(), "deadline", now, "not_before", "",
		"attempts_made", "0", "last_error", "", "created_at", now, "updated_at", now, "completed_at", "",
		"expire_at", now).Err()
}

func benchIdentity() ledger.Identity {
	return ledger.Identity{
		RunID: ledger.KeyedRunID("bench", "job", uuid.NewString()), Namespace: "ledgertest/ns", Job: "job",
		Key: "sched-job", ScheduleTime: time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
		PayloadHash: ledger.PayloadHash([]byte(`{"n":1}`)), Payload: []byte(`{"n":1}`),
	}
}

// BenchmarkRawInsert measures the raw HSET alone, beside the suite's ClaimNew.
func BenchmarkRawInsert(b *testing.B) {
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l := openTest(b, nil)
			ids := make([]ledger.Identity, b.N)
			for i := range ids {
				ids[i] = benchIdentity()
			}
			benchloop.Run(b, n, func(ctx context.Context, i int) error {
				return rawClaim(ctx, l.rdb, l.o.Prefix, ids[i])
			})
		})
	}
}

// BenchmarkClaimVsRaw alternates rounds of the raw HSET and of the new-run claim on one
// client, so that both see the same load on a shared machine, and reports each rate and
// their ratio.
func BenchmarkClaimVsRaw(b *testing.B) {
	const round = 400
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l := openTest(b, nil)
			ctx := b.Context()
			var rawTime, claimTime time.Duration
			var rawOps, claimOps int
			spread := func(ops int, op func(context.Context) error) time.Duration {
				var next atomic.Int64
				var failed atomic.Value
				var wg sync.WaitGroup
				start := time.Now()
				for range n {
					wg.Go(func() {
						for next.Add(1) <= int64(ops) {
							if err := op(ctx); err != nil {
								failed.Store(err)
								return
							}
						}
					})
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				ops := min(round, b.N-done)
				rawTime += spread(ops, func(ctx context.Context) error { return rawClaim(ctx, l.rdb, l.o.Prefix, benchIdentity()) })
				rawOps += ops
				claimTime += spread(ops, func(ctx context.Context) error {
					_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: benchIdentity(), AttemptID: uuid.NewString()})
					return err
				})
				claimOps += ops
			}
			b.StopTimer()
			raw := float64(rawOps) / rawTime.Seconds()
			claim := float64(claimOps) / claimTime.Seconds()
			b.ReportMetric(raw, "raw-ops/s")
			b.ReportMetric(claim, "claim-ops/s")
			b.ReportMetric(claim/raw, "claim/raw")
		})
	}
}

func TestInterpretError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want error
	}{
		{context.DeadlineExceeded, ledger.ErrUnavailable},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, ledger.ErrUnavailable},
		{redis.ErrClosed, ledger.ErrUnavailable},
		{errors.New("LOADING Redis is loading the dataset in memory"), ledger.ErrUnavailable},
		{errors.New("READONLY You can't write against a read only replica."), ledger.ErrUnavailable},
		{errors.New("BUSY Redis is busy running a script"), ledger.ErrContended},
		{errors.New("OOM command not allowed when used memory > 'maxmemory'."), ledger.ErrUnavailable},
		{errors.New("OOM command not allowed when used memory > 'maxmemory'. script: 0123abcd, on @user_script:12."), ErrOutOfMemory},
	} {
		got := interpretError("op", tc.err)
		if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("interpretError(%v) = %v, want it to wrap %v and the cause", tc.err, got, tc.want)
		}
	}
	if got := interpretError("op", errors.New("ERR syntax")); ledger.Retryable(got) {
		t.Errorf("interpretError(ERR syntax) = %v, want no retryable sentinel", got)
	}
}

// TestEffectsLiveAsLongAsTheirRun: a run write that keeps the run longer than one of its
// effects keeps the effect as long too (its expire_at, its index entry and its key's
// expiry), so that a done effect never expires before the run that skips it.
func TestEffectsLiveAsLongAsTheirRun(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	id := ledger.KeyedRunID("effects", "job", uuid.NewString())
	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id}, AttemptID: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f := ledger.Fence{RunID: id, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	for _, name := range []string{"short", "long"} {
		keep := time.Hour
		if name == "long" {
			keep = 30 * 24 * time.Hour
		}
		if _, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: name, Retention: keep}); err != nil {
			t.Fatal(err)
		}
	}
	done, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f, Retention: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	short, err := l.GetEffect(ctx, &ledger.GetEffectParams{RunID: id, Name: "short"})
	if err != nil || short.ExpireAt.Before(done.ExpireAt) {
		t.Fatalf("effect kept 1h, run then kept 48h: effect ExpireAt %v, run %v (%v); want the effect at least as long", short.ExpireAt, done.ExpireAt, err)
	}
	long, err := l.GetEffect(ctx, &ledger.GetEffectParams{RunID: id, Name: "long"})
	if err != nil || !long.ExpireAt.After(done.ExpireAt) {
		t.Fatalf("an effect kept longer than the run was shortened: %v, run %v (%v)", long.ExpireAt, done.ExpireAt, err)
	}
	if ttl, err := l.rdb.PTTL(ctx, l.effectKey(short.Key)).Result(); err != nil || ttl < 48*time.Hour {
		t.Fatalf("the short effect's key expires in %v (%v), want at least the run's 48h", ttl, err)
	}
}

// TestClaimsTrimTheExpiryIndex: entries of records whose keys Redis expired leave the
// expiry index with the next claims, without a sweep.
func TestClaimsTrimTheExpiryIndex(t *testing.T) {
	t.Parallel()
	l := openTest(t, &Options{Grace: time.Millisecond})
	ctx := t.Context()
	for range 3 {
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: ledger.KeyedRunID("trim", "job", uuid.NewString())},
			AttemptID: "a", Retention: time.Millisecond, PickupTimeout: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: ledger.KeyedRunID("trim", "job", uuid.NewString())}, AttemptID: "a"}); err != nil {
		t.Fatal(err)
	}
	if n, err := l.rdb.ZCard(ctx, l.expireKey).Result(); err != nil || n != 1 {
		t.Fatalf("expiry index holds %d entries (%v), want 1: the last claim's", n, err)
	}
}

// TestEffectWrittenAfterItsRunLivesAsLong: an effect begun and completed after its run's
// last write, with a shorter retention, keeps its own ExpireAt, but its key does not
// expire before the run's: no later write of the run need come to lift it.
func TestEffectWrittenAfterItsRunLivesAsLong(t *testing.T) {
	t.Parallel()
	l := openTest(t, &Options{Grace: time.Millisecond})
	ctx := t.Context()
	id := ledger.KeyedRunID("effects-after", "job", uuid.NewString())
	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id}, AttemptID: "w", Lease: time.Minute, Retention: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := ledger.Fence{RunID: id, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	if _, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "e", Retention: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e, err := l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: f, Name: "e", Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if e.ExpireAt.After(e.UpdatedAt.Add(time.Second)) {
		t.Fatalf("effect ExpireAt %v, want its own (written %v, kept 1ms)", e.ExpireAt, e.UpdatedAt)
	}
	if ttl, err := l.rdb.PTTL(ctx, l.effectKey(e.Key)).Result(); err != nil || ttl < 47*time.Hour {
		t.Fatalf("the effect's key expires in %v (%v), want at least the run's 48h", ttl, err)
	}
	score, err := l.rdb.ZScore(ctx, l.expireKey, "e:"+e.Key).Result()
	if err != nil || int64(score) < a.Run.ExpireAt.UnixMicro() {
		t.Fatalf("the effect's expiry index entry is %v (%v), want at least the run's expire_at %v", int64(score), err, a.Run.ExpireAt.UnixMicro())
	}
}

// TestMustExistAgainstSweep races a worker claim that must not create its run with a
// sweep of that run, expired: exactly one of them wins. Either the sweep deleted the run
// and the claim answers ErrNotFound, or the claim took the run (renewing its expiry) and
// the sweep left it; never both, which would mean the claim wrote a run the sweep had
// deleted between the claim's check and its write.
func TestMustExistAgainstSweep(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	t1 := t0.Add(time.Second)
	for round := range 20 {
		id := benchIdentity()
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: uuid.NewString(),
			Retention: time.Millisecond, PickupTimeout: time.Millisecond, Now: t0}); err != nil {
			t.Fatal(err)
		}
		var (
			wg       sync.WaitGroup
			swept    int
			sweepErr error
			res      *ledger.AcquireResult
			acqErr   error
		)
		wg.Go(func() { swept, sweepErr = l.Sweep(ctx, &ledger.SweepParams{Now: t1}) })
		wg.Go(func() {
			res, acqErr = l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: uuid.NewString(),
				Lease: time.Minute, MustExist: true, Now: t1})
		})
		wg.Wait()
		if sweepErr != nil {
			t.Fatalf("round %d: Sweep: %v", round, sweepErr)
		}
		acquired := acqErr == nil && res.Outcome == ledger.OutcomeAcquired
		if !acquired && !errors.Is(acqErr, ledger.ErrNotFound) {
			t.Fatalf("round %d: Acquire = %+v, %v; want acquired or ErrNotFound", round, res, acqErr)
		}
		if acquired == (swept == 1) {
			t.Fatalf("round %d: the sweep deleted %d runs and the claim acquired = %v: want exactly one of them", round, swept, acquired)
		}
		_, err := l.Get(ctx, &ledger.GetParams{RunID: id.RunID})
		if exists := err == nil; exists != acquired {
			t.Fatalf("round %d: after the race the run exists = %v (%v), the claim acquired = %v", round, exists, err, acquired)
		}
	}
}

// BenchmarkBatch measures a run of 10,000 items through worker.Batch beside the same
// items as one worker.Effect each (the raw effect write), on this backend: items/s and
// ledger writes per item (workertest.BenchmarkBatch).
func BenchmarkBatch(b *testing.B) { workertest.BenchmarkBatch(b, harness().Open) }

// roundTrips is a go-redis hook that counts a client's round trips (a command, or a
// pipeline of them) and names each by its commands.
type roundTrips struct {
	mu    sync.Mutex
	calls []string
}

func (h *roundTrips) add(cmds []redis.Cmder) {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, strings.Join(names, "+"))
}

// take returns the round trips counted since the last take.
func (h *roundTrips) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.calls
	h.calls = nil
	return out
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds)
		return next(ctx, cmds)
	}
}

// TestClaimRoundTrips pins the ingress claim's cost: a new run and a duplicate are each
// one round trip (one EVALSHA once the script is loaded), and a duplicate writes nothing:
// the run's hash and every key of the ledger's prefix are as they were.
func TestClaimRoundTrips(t *testing.T) {
	t.Parallel()
	o, err := redis.ParseURL(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &roundTrips{}
	rdb.AddHook(hook)
	prefix := newPrefix(t, rdb)
	l, err := New(t.Context(), rdb, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	check := func(what string, want ...string) {
		t.Helper()
		got := hook.take()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s made the round trips %v, want exactly %v", what, got, want)
		}
		t.Logf("%s: %d round trip(s) %v", what, len(got), got)
	}
	// Load the claim script on the server (a first EVALSHA may answer NOSCRIPT and send
	// EVAL), so that what follows is the warm path.
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: benchIdentity(), AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	hook.take()

	ident := benchIdentity()
	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
	if err != nil || !res.Created {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	check("the ingress claim of a new run", "evalsha")

	snapshot := func() map[string]string {
		t.Helper()
		keys, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, k := range keys {
			dump, err := rdb.Dump(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[k] = dump
		}
		hook.take()
		return out
	}
	before := snapshot()
	for i := range 3 {
		dup, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
		if err != nil || dup.Created || dup.Run.AttemptID != res.Run.AttemptID {
			t.Fatalf("duplicate Claim %d = %+v, %v", i, dup, err)
		}
		check(fmt.Sprintf("duplicate claim %d", i), "evalsha")
	}
	after := snapshot()
	if len(after) != len(before) {
		t.Fatalf("the duplicates changed the ledger's keys: %d before, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("the duplicates rewrote %s", k)
		}
	}
}

// BenchmarkDuplicateVsNew compares a duplicate claim with a new one
// (ledgertest.DuplicateVsNew): the raw write is rawClaim (one HSET, no script); a
// duplicate is one script that reads and writes nothing.
func BenchmarkDuplicateVsNew(b *testing.B) {
	ledgertest.DuplicateVsNew(b, 400, func(b *testing.B) ledgertest.Duplicates {
		l := openTest(b, nil)
		rdb := sharedClient(b)
		return ledgertest.Duplicates{Ledger: l, Identity: benchIdentity,
			Raw: func(ctx context.Context) error { return rawClaim(ctx, rdb, l.o.Prefix, benchIdentity()) }}
	})
}

// writeHook counts a client's round trips (a command, or a pipeline of them), each as a
// write when the ledger's keys changed across it (snapshot, taken on another client
// before and after, differs) and as a read otherwise.
type writeHook struct {
	snapshot func(ctx context.Context) string
	mu       sync.Mutex
	ops      ledgertest.Ops
}

func (h *writeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *writeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.count(ctx, func() error { return next(ctx, cmd) })
	}
}

func (h *writeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.count(ctx, func() error { return next(ctx, cmds) })
	}
}

func (h *writeHook) count(ctx context.Context, roundTrip func() error) error {
	before := h.snapshot(ctx)
	err := roundTrip()
	changed := h.snapshot(ctx) != before
	h.mu.Lock()
	defer h.mu.Unlock()
	if changed {
		h.ops.Writes++
	} else {
		h.ops.Reads++
	}
	return err
}

// take returns the round trips counted since the last take.
func (h *writeHook) take() ledgertest.Ops {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := h.ops
	h.ops = ledgertest.Ops{}
	return ops
}

// TestCapacityOps measures a run's operations on the ledger, each round trip a write
// when it changed a key of the ledger's prefix (its value or its expiry) and a read
// otherwise, and checks them against Redis's row of docs/capacity.md.
func TestCapacityOps(t *testing.T) {
	t.Parallel()
	o, err := redis.ParseURL(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	plain := sharedClient(t)
	prefix := newPrefix(t, plain)
	hook := &writeHook{snapshot: func(ctx context.Context) string {
		keys, err := plain.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Errorf("keys: %v", err)
		}
		slices.Sort(keys)
		var all strings.Builder
		for _, k := range keys {
			dump, _ := plain.Dump(ctx, k).Result()
			at, _ := plain.PExpireTime(ctx, k).Result()
			fmt.Fprintf(&all, "%s=%x@%d;", k, dump, at)
		}
		return all.String()
	}}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hook)
	l, err := New(t.Context(), rdb, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.CheckCapacityTable(t, "Redis", ledgertest.MeasureRunOps(t, l, hook.take))
}
