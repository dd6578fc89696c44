package spannerledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/google/uuid"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/ledgertest"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

const (
	testProject  = "runonce-test"
	testInstance = "projects/" + testProject + "/instances/ledgertest"
)

// emulator returns SPANNER_EMULATOR_HOST, skipping the test when it is unset, or failing
// it when CI=true.
func emulator(tb testing.TB) string {
	tb.Helper()
	host := os.Getenv("SPANNER_EMULATOR_HOST")
	if host == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("SPANNER_EMULATOR_HOST is not set, and CI=true: scripts/services.sh must start the Spanner emulator")
		}
		tb.Skip("set SPANNER_EMULATOR_HOST to run against the Spanner emulator (scripts/services.sh start DIR)")
	}
	return host
}

var shared struct {
	once  sync.Once
	admin *database.DatabaseAdminClient
	err   error
}

// adminClient is the tests' database admin client; the first call creates the instance.
func adminClient(tb testing.TB) *database.DatabaseAdminClient {
	tb.Helper()
	emulator(tb)
	shared.once.Do(func() {
		ctx := context.Background()
		ic, err := instance.NewInstanceAdminClient(ctx)
		if err != nil {
			shared.err = err
			return
		}
		defer ic.Close()
		op, err := ic.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
			Parent: "projects/" + testProject, InstanceId: "ledgertest",
			Instance: &instancepb.Instance{Config: "projects/" + testProject + "/instanceConfigs/emulator-config",
				DisplayName: "ledgertest", NodeCount: 1},
		})
		if err == nil {
			_, err = op.Wait(ctx)
		}
		if err != nil && status.Code(err) != codes.AlreadyExists {
			shared.err = fmt.Errorf("create the test instance: %w", err)
			return
		}
		shared.admin, shared.err = database.NewDatabaseAdminClient(ctx)
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.admin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.admin != nil {
		_ = shared.admin.Close()
	}
	os.Exit(code)
}

// newDatabase creates an empty database (with the schema unless bare) and drops it in
// tb.Cleanup.
func newDatabase(tb testing.TB, bare bool) string {
	tb.Helper()
	admin := adminClient(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "t" + hex.EncodeToString(b[:])
	req := &databasepb.CreateDatabaseRequest{Parent: testInstance, CreateStatement: "CREATE DATABASE `" + id + "`"}
	if !bare {
		req.ExtraStatements = Schema
	}
	ctx := context.Background()
	op, err := admin.CreateDatabase(ctx, req)
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil {
		tb.Fatalf("create database %s: %v", id, err)
	}
	name := testInstance + "/databases/" + id
	tb.Cleanup(func() {
		if err := admin.DropDatabase(context.Background(), &databasepb.DropDatabaseRequest{Database: name}); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
	})
	return name
}

// openTest opens a ledger on a fresh database, closed in tb.Cleanup.
func openTest(tb testing.TB, opts *Options) *Ledger {
	tb.Helper()
	db := newDatabase(tb, false)
	o := Options{NoMigrate: true}
	if opts != nil {
		o = *opts
		o.NoMigrate = true
	}
	l, err := Open(context.Background(), db, &o)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

func harness() ledgertest.Harness {
	return ledgertest.Harness{
		Operations: true,
		Open:       func(tb testing.TB) ledger.Driver { return openTest(tb, nil) },
		// A second client of the same database whose process clock is skewed: every
		// decision is Spanner's, and the claim's estimate of Spanner's clock cancels a
		// constant skew.
		SkewedClient: func(tb testing.TB, l ledger.Driver, skew func() time.Duration) ledger.Driver {
			tb.Helper()
			skewed, err := Open(context.Background(), l.(*Ledger).Database(), &Options{
				NoMigrate: true,
				Clock:     func() time.Time { return time.Now().Add(skew()) },
			})
			if err != nil {
				tb.Fatalf("Open skewed client: %v", err)
			}
			tb.Cleanup(func() { _ = skewed.Close() })
			return skewed
		},
		SupportsNow: true,
	}
}

func TestConformance(t *testing.T) { ledgertest.Run(t, harness()) }

func BenchmarkLedger(b *testing.B) { ledgertest.Benchmark(b, harness()) }

func TestURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t.Run("MigratesAnEmptyDatabase", func(t *testing.T) {
		db := newDatabase(t, true)
		l, err := ledger.Open(ctx, "spanner://"+db)
		if err != nil {
			t.Fatalf("ledger.Open: %v", err)
		}
		defer l.Close()
		if got := l.Driver().(*Ledger).Database(); got != db {
			t.Fatalf("database = %q, want %q", got, db)
		}
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: ledger.KeyedRunID("u", "j", "k")}, AttemptID: "a"}); err != nil {
			t.Fatalf("Claim through a URL-opened ledger: %v", err)
		}
		again, err := ledger.Open(ctx, "spanner://"+db)
		if err != nil {
			t.Fatalf("a second Open of a migrated database: %v", err)
		}
		_ = again.Close()
	})
	t.Run("NoMigrate", func(t *testing.T) {
		db := newDatabase(t, true)
		l, err := ledger.Open(ctx, "spanner://"+db+"?migrate=false")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = l.Get(ctx, &ledger.GetParams{RunID: ledger.KeyedRunID("u", "j", "k")})
		if err == nil || errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Get on a database never migrated = %v, want an error about the missing table", err)
		}
		created, err := Migrate(ctx, adminClient(t), db)
		if err != nil || !created {
			t.Fatalf("Migrate = %v, %v; want the tables created", created, err)
		}
		_, err = l.Get(ctx, &ledger.GetParams{RunID: ledger.KeyedRunID("u", "j", "k")})
		if !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Get after Migrate = %v, want ErrNotFound", err)
		}
	})
	// A database an earlier release created, with runs in it, is upgraded by instances
	// that open it at once: the columns added since, the shard column computed for the
	// runs already there, the time indexes replaced by shard-led ones; the runs are then
	// listed, rescued and swept, and a second Migrate finds nothing to do.
	for _, release := range []struct{ name, last string }{
		{"FirstRelease", "CREATE TABLE effects"},
		{"ReleaseBeforeShards", "ALTER TABLE runs ADD COLUMN progress"},
	} {
		t.Run("Upgrades"+release.name, func(t *testing.T) {
			db := newDatabase(t, true)
			admin := adminClient(t)
			var earlier []string
			for _, stmt := range Schema {
				earlier = append(earlier, stmt)
				if strings.HasPrefix(stmt, release.last) {
					break
				}
			}
			op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: earlier})
			if err == nil {
				err = op.Wait(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			client, err := spanner.NewClient(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			past := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
			lost, expired := ledger.KeyedRunID("u", "j", "lost"), ledger.KeyedRunID("u", "j", "expired")
			cols := []string{"run_id", "namespace", "job", "run_key", "payload_hash", "status", "attempt", "attempt_id",
				"deadline", "attempts_made", "last_error", "created_at", "updated_at", "expire_at"}
			if _, err := client.Apply(ctx, []*spanner.Mutation{
				spanner.Insert("runs", cols, []any{lost, "u", "j", "lost", "h", "queued", int64(0), "a", past, int64(0), "", past, past, past.Add(48 * time.Hour)}),
				spanner.Insert("runs", cols, []any{expired, "u", "j", "expired", "h", "completed", int64(1), "a", nil, int64(1), "", past, past, past.Add(time.Minute)}),
			}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					if created, err := Migrate(ctx, admin, db); err != nil || created {
						t.Errorf("Migrate of a database with the tables = %v, %v; want it upgraded, no tables created", created, err)
					}
				})
			}
			wg.Wait()
			if created, err := Migrate(ctx, admin, db); err != nil || created {
				t.Fatalf("a second Migrate = %v, %v", created, err)
			}
			ddl, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
			if err != nil {
				t.Fatal(err)
			}
			if todo := pending(ddl.Statements); len(todo) > 0 {
				t.Fatalf("after Migrate, still pending: %q", todo)
			}
			if got, want := liveIndexes(ddl.Statements), liveIndexes(Schema); !maps.Equal(got, want) {
				t.Fatalf("the upgraded database's indexes are %v, want Schema's %v", got, want)
			}
			l, err := ledger.Open(ctx, "spanner://"+db+"?migrate=false")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if rescue, err := l.ListRescue(ctx, &ledger.ListRescueParams{}); err != nil || len(rescue) != 1 || rescue[0].ID != lost {
				t.Fatalf("ListRescue after the upgrade = %v, %v; want the earlier release's run %s past its deadline", rescue, err, lost)
			}
			if page, err := l.List(ctx, &ledger.ListParams{Job: "j"}); err != nil || len(page.Runs) != 2 {
				t.Fatalf("List after the upgrade = %v, %v; want the earlier release's 2 runs", page, err)
			}
			if n, err := l.Sweep(ctx, &ledger.SweepParams{}); err != nil || n != 1 {
				t.Fatalf("Sweep after the upgrade = %d, %v; want the expired run deleted", n, err)
			}
			id := ledger.KeyedRunID("u", "j", "k")
			res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: ledger.PayloadHash(nil)}, AttemptID: "a"})
			if err != nil {
				t.Fatal(err)
			}
			f := ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: "a"}
			if r, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f, Result: []byte(`1`), Progress: []byte(`2`)}); err != nil || string(r.Result) != "1" || string(r.Progress) != "2" {
				t.Fatalf("Complete with a result and progress on the upgraded database = %v, %v", r, err)
			}
		})
	}
	for _, bad := range []struct{ url, want string }{
		{"spanner://projects/p/instances/i", "names no database"},
		{"spanner://projects/p/instances/i/databases/d?migrate=perhaps", "migrate"},
		{"spanner://projects/p/instances/i/databases/d?pool=3", `"pool"`},
		{"spanner://user:pw@projects/p/instances/i/databases/d", "credentials"},
	} {
		t.Run(bad.url, func(t *testing.T) {
			_, err := ledger.Open(ctx, bad.url)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("Open(%s): error = %v, want one containing %s", bad.url, err, bad.want)
			}
		})
	}
}

// TestRowDeletionPolicies: the schema Spanner holds declares the row deletion policy on
// the runs' expire_at, which deletes expired runs with no sweeper, and none on effects,
// which go only with their run (interleaved, ON DELETE CASCADE): a policy of their own
// would delete a live run's done effect, and a later attempt would redo it.
func TestRowDeletionPolicies(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, false)
	ddl, err := adminClient(t).GetDatabaseDdl(t.Context(), &databasepb.GetDatabaseDdlRequest{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(ddl.Statements, "\n")
	if n := strings.Count(all, "ROW DELETION POLICY"); n != 1 {
		t.Fatalf("the schema has %d row deletion policies, want 1 (runs):\n%s", n, all)
	}
	for _, s := range ddl.Statements {
		switch {
		case hasTable(s, "runs") && !strings.Contains(s, "ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))"):
			t.Errorf("runs has no row deletion policy on expire_at:\n%s", s)
		case hasTable(s, "effects") && (strings.Contains(s, "ROW DELETION POLICY") || !strings.Contains(s, "INTERLEAVE IN PARENT runs ON DELETE CASCADE")):
			t.Errorf("effects must go with their run only (interleaved, ON DELETE CASCADE, no policy of their own):\n%s", s)
		}
	}
}

// rawInsert is the limit the new-run claim is compared with: the same insert mutation of
// the same row, applied the same way (one Commit), without the ledger.
func rawInsert(ctx context.Context, l *Ledger, id ledger.Identity) error {
	now := time.Now()
	_, err := l.client.Apply(ctx, []*spanner.Mutation{spanner.Insert("runs", runColumns, []any{
		id.RunID, id.Namespace, id.Job, id.Key, id.ScheduleTime, id.PayloadHash, id.Payload, "queued", int64(0),
		uuid.NewString(), now.Add(5 * time.Minute), nil, int64(0), "", now, now, nil, now.Add(ledger.DefaultRetention), nil, []byte(nil), []byte(nil),
	})}, spanner.ApplyAtLeastOnce())
	return err
}

func benchIdentity() ledger.Identity {
	return ledger.Identity{
		RunID: ledger.KeyedRunID("bench", "job", uuid.NewString()), Namespace: "ledgertest/ns", Job: "job",
		Key: "sched-job", ScheduleTime: time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
		PayloadHash: ledger.PayloadHash([]byte(`{"n":1}`)), Payload: []byte(`{"n":1}`),
	}
}

// BenchmarkClaimVsRaw alternates rounds of the raw insert and of the new-run claim on one
// client, so that both see the same load, and reports each rate and their ratio.
func BenchmarkClaimVsRaw(b *testing.B) {
	const round = 100
	for _, n := range []int{1, 8} {
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
				rawTime += spread(ops, func(ctx context.Context) error { return rawInsert(ctx, l, benchIdentity()) })
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

// BenchmarkRawInsert measures the raw insert alone, beside the suite's ClaimNew.
func BenchmarkRawInsert(b *testing.B) {
	l := openTest(b, nil)
	ids := make([]ledger.Identity, b.N)
	for i := range ids {
		ids[i] = benchIdentity()
	}
	benchloop.Run(b, 1, func(ctx context.Context, i int) error { return rawInsert(ctx, l, ids[i]) })
}

func TestInterpretError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want error
	}{
		{status.Error(codes.Unavailable, "down"), ledger.ErrUnavailable},
		{status.Error(codes.DeadlineExceeded, "slow"), ledger.ErrUnavailable},
		{status.Error(codes.Aborted, "conflict"), ledger.ErrContended},
		// The emulator, its transaction rolled back under a concurrent one (seen in CI,
		// ConcurrentAcquireOneWinner).
		{status.Error(codes.FailedPrecondition, "Cannot commit a transaction after it has been rolled back."), ledger.ErrContended},
		{context.DeadlineExceeded, ledger.ErrUnavailable},
		// A call out of time before its next try (readWrite), its transactions aborted,
		// or closed by a newer one on the emulator's session.
		{fmt.Errorf("%w after 3 tries: %w", errGaveUp, status.Error(codes.Aborted, "conflict")), ledger.ErrContended},
		{fmt.Errorf("%w after 3 tries: %w", errGaveUp, status.Error(codes.FailedPrecondition, "Invalid transaction ID. Transaction ID must be >= 12")), ledger.ErrContended},
		{status.Error(codes.NotFound, "Transaction not found: 4665"), ledger.ErrContended},
	} {
		got := interpretError("op", tc.err)
		if !errors.Is(got, tc.want) {
			t.Errorf("interpretError(%v) = %v, want it to wrap %v", tc.err, got, tc.want)
		}
	}
	if got := interpretError("op", status.Error(codes.InvalidArgument, "bad")); ledger.Retryable(got) {
		t.Errorf("interpretError(InvalidArgument) = %v, want no retryable sentinel", got)
	}
}

// TestReplayedClaimFindsItsOwnRecord: an insert applied at least once that the client
// replays after its first try committed fails with AlreadyExists; the read finds the
// claim's own attempt ID, and the claim is answered as created, not as a duplicate.
func TestReplayedClaimFindsItsOwnRecord(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	p := &ledger.ClaimParams{Identity: benchIdentity(), AttemptID: uuid.NewString()}
	first, err := l.Claim(t.Context(), p)
	if err != nil || !first.Created {
		t.Fatalf("first claim = %+v, %v", first, err)
	}
	again, err := l.Claim(t.Context(), p)
	if err != nil || !again.Created || again.PayloadMismatch || !again.Run.CreatedAt.Equal(first.Run.CreatedAt) {
		t.Fatalf("the replayed claim = %+v, %v; want created, the first try's record", again, err)
	}
	other, err := l.Claim(t.Context(), &ledger.ClaimParams{Identity: p.Identity, AttemptID: uuid.NewString()})
	if err != nil || other.Created {
		t.Fatalf("another claim of the run = %+v, %v; want a duplicate", other, err)
	}
}

// TestConcurrentOpenMigrates opens one empty database from several ledgers at once: one
// creates the tables, the others find them, and all of them open.
func TestConcurrentOpenMigrates(t *testing.T) {
	t.Parallel()
	db := newDatabase(t, true)
	ledgertest.CheckConcurrentOpens(t, 4, func(ctx context.Context) (ledger.Driver, error) { return Open(ctx, db, nil) })
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

// rpcCounter counts a client's gRPC calls on the data path, by method; the session pool's
// own calls (creating and deleting sessions) are not counted. It keeps each mutation of
// the runs table in a commit: the columns it writes and the size of its commit request.
type rpcCounter struct {
	mu     sync.Mutex
	calls  []string
	writes ledgertest.WriteLog
	ops    ledgertest.Ops // rows mutated and reads (queries and key reads), for TestCapacityOps
	// reads are the key reads made, as "table(column, …)".
	reads []string
}

// addRead records a read of cols of table.
func (c *rpcCounter) addRead(table string, cols []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads = append(c.reads, table+"("+strings.Join(cols, ", ")+")")
}

// takeReads returns the reads recorded since the last takeReads.
func (c *rpcCounter) takeReads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reads
	c.reads = nil
	return out
}

// readRecorder records the key reads sent on a stream.
type readRecorder struct {
	grpc.ClientStream
	c *rpcCounter
}

func (s readRecorder) SendMsg(m any) error {
	if r, ok := m.(*spannerpb.ReadRequest); ok {
		s.c.addRead(r.GetTable(), r.GetColumns())
	}
	return s.ClientStream.SendMsg(m)
}

func (c *rpcCounter) add(method string, req any) {
	m := method[strings.LastIndex(method, "/")+1:]
	if strings.Contains(m, "Session") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, m)
	switch m {
	case "ExecuteStreamingSql", "ExecuteSql", "StreamingRead", "Read":
		c.ops.Reads++
	}
	if commit, ok := req.(*spannerpb.CommitRequest); ok {
		c.ops.Writes += len(commit.GetMutations())
		for _, mu := range commit.GetMutations() {
			var w *spannerpb.Mutation_Write
			switch op := mu.GetOperation().(type) {
			case *spannerpb.Mutation_Insert:
				w = op.Insert
			case *spannerpb.Mutation_Update:
				w = op.Update
			case *spannerpb.Mutation_InsertOrUpdate:
				w = op.InsertOrUpdate
			case *spannerpb.Mutation_Replace:
				w = op.Replace
			}
			if w.GetTable() == "runs" {
				c.writes.Add(ledgertest.TransitionWrite{Fields: w.GetColumns(), Bytes: proto.Size(commit)})
			}
		}
	}
}

// takeOps returns the rows mutated and the reads since the last takeOps.
func (c *rpcCounter) takeOps() ledgertest.Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = ledgertest.Ops{}
	return ops
}

// take returns the calls counted since the last take.
func (c *rpcCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// countingLedger opens a ledger on db through a client whose every unary and streaming
// RPC goes through counter.
func countingLedger(t *testing.T, db string) (*Ledger, *rpcCounter) {
	t.Helper()
	counter := &rpcCounter{}
	client, err := spanner.NewClient(context.Background(), db,
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			counter.add(method, req)
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			counter.add(method, nil)
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return readRecorder{ClientStream: cs, c: counter}, nil
		})),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	l, err := New(context.Background(), client, nil)
	if err != nil {
		t.Fatal(err)
	}
	counter.take()
	return l, counter
}

// TestClaimRoundTrips pins the RPCs of the ingress claim's paths: a new run is one
// Commit; a duplicate of a run the ledger has seen exist is one strong read (no commit,
// so no lock); a ledger that has not seen it pays a rejected Commit and a read once.
func TestClaimRoundTrips(t *testing.T) {
	t.Parallel()
	emulator(t)
	db := newDatabase(t, false)
	l, counter := countingLedger(t, db)
	ctx := t.Context()
	check := func(what string, want ...string) {
		t.Helper()
		got := counter.take()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s made the RPCs %v, want exactly %v", what, got, want)
		}
		t.Logf("%s: %d RPC(s) %v", what, len(got), got)
	}
	ident := benchIdentity()
	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
	if err != nil || !res.Created {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	check("the ingress claim of a new run", "Commit")

	dup, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
	if err != nil || dup.Created || dup.Run.AttemptID != res.Run.AttemptID {
		t.Fatalf("duplicate Claim = %+v, %v", dup, err)
	}
	check("a duplicate claim of a run this ledger created (one read)", "ExecuteStreamingSql")

	other, otherCounter := countingLedger(t, db)
	for i, want := range [][]string{{"Commit", "ExecuteStreamingSql"}, {"ExecuteStreamingSql"}} {
		dup, err := other.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
		if err != nil || dup.Created || dup.Run.AttemptID != res.Run.AttemptID {
			t.Fatalf("duplicate Claim %d through another ledger = %+v, %v", i, dup, err)
		}
		got := otherCounter.take()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("duplicate claim %d through a ledger that had not seen the run made %v, want exactly %v", i, got, want)
		}
		t.Logf("duplicate claim %d through a ledger that had not seen the run: %v", i, got)
	}

	// A known run deleted since: the read finds nothing, and the claim inserts it.
	gone := benchIdentity()
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: gone, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.client.Apply(ctx, []*spanner.Mutation{spanner.Delete("runs", spanner.Key{gone.RunID})}); err != nil {
		t.Fatal(err)
	}
	counter.take()
	again, err := l.Claim(ctx, &ledger.ClaimParams{Identity: gone, AttemptID: uuid.NewString()})
	if err != nil || !again.Created {
		t.Fatalf("Claim of a known run deleted since = %+v, %v; want it created", again, err)
	}
	check("the claim of a known run deleted since (a read finds nothing, a Commit)", "ExecuteStreamingSql", "Commit")
}

// BenchmarkDuplicateVsNew compares a duplicate claim with a new one
// (ledgertest.DuplicateVsNew): the raw write is rawInsert; a duplicate of a run this
// ledger created is one strong read, and dup-insert-first takes it as a ledger that has
// not seen the run does (the insert rejected with AlreadyExists, then a strong read: the
// former path).
func BenchmarkDuplicateVsNew(b *testing.B) {
	ledgertest.DuplicateVsNew(b, 200, func(b *testing.B) ledgertest.Duplicates {
		l := openTest(b, nil)
		return ledgertest.Duplicates{Ledger: l, Identity: benchIdentity,
			Raw: func(ctx context.Context) error { return rawInsert(ctx, l, benchIdentity()) },
			Others: func(hot ledger.Identity) []benchloop.Kind {
				return []benchloop.Kind{{Name: "dup-insert-first", Op: func(ctx context.Context) error {
					if err := rawInsert(ctx, l, hot); spanner.ErrCode(err) != codes.AlreadyExists {
						return fmt.Errorf("insert of the hot run: %v, want AlreadyExists", err)
					}
					_, err := l.Get(ctx, &ledger.GetParams{RunID: hot.RunID})
					return err
				}}}
			}}
	})
}

// TestCapacityOps measures a run's operations on the ledger in rows mutated (each
// mutation of a Commit) and reads (each query or read RPC), and checks them against
// Spanner's row of docs/capacity.md.
func TestCapacityOps(t *testing.T) {
	t.Parallel()
	emulator(t)
	l, counter := countingLedger(t, newDatabase(t, false))
	ledgertest.CheckCapacityTable(t, "Spanner", ledgertest.MeasureRunOps(t, l, counter.takeOps))
}

// TestTransitionsWriteWhatChanges checks that a transition's mutation of an existing
// run writes only the columns it changes (ledgertest.CheckTransitionWrites).
func TestTransitionsWriteWhatChanges(t *testing.T) {
	t.Parallel()
	emulator(t)
	l, counter := countingLedger(t, newDatabase(t, false))
	ledgertest.CheckTransitionWrites(t, l, l, counter.writes.Take,
		[]string{"payload", "payload_hash", "namespace", "job", "run_key", "schedule_time", "created_at"})
}

// TestTransitionsReadByKey pins what each transition reads and how many round trips it
// takes: the records by key (a read of one row, never a query), the clock only when
// the verdict depends on it (a lease granted or judged), and an effect's write reads of
// its run only the fence (fenceColumns), so that on Spanner, which locks the cells a
// transaction reads, it never waits on nor aborts the holder's renewal, which writes
// the lease's columns. (The emulator runs one transaction at a time: only these round
// trips can show it.)
func TestTransitionsReadByKey(t *testing.T) {
	t.Parallel()
	emulator(t)
	l, counter := countingLedger(t, newDatabase(t, false))
	ctx := t.Context()
	runRead := "runs(" + strings.Join(runColumns, ", ") + ")"
	fenceRead := "runs(" + strings.Join(fenceColumns, ", ") + ")"
	effectRead := "effects(" + strings.Join(effectColumns, ", ") + ")"
	check := func(what string, err error, calls []string, reads ...string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		gotCalls, gotReads := counter.take(), counter.takeReads()
		if strings.Join(gotCalls, ",") != strings.Join(calls, ",") || strings.Join(gotReads, ";") != strings.Join(reads, ";") {
			t.Fatalf("%s made the RPCs %v reading %v; want %v reading %v", what, gotCalls, gotReads, calls, reads)
		}
	}
	const read, clock, commit = "StreamingRead", "ExecuteStreamingSql", "Commit"
	id := benchIdentity()
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	counter.take()
	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: uuid.NewString(), Lease: time.Minute})
	check("the worker claim of a queued run (a lease granted)", err, []string{read, clock, commit}, runRead)
	f := ledger.Fence{RunID: id.RunID, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	held, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: uuid.NewString(), Lease: time.Minute})
	check("a duplicate's claim of the run held for a minute (answered without the clock)", err, []string{read, commit}, runRead)
	if held.Outcome != ledger.OutcomeHeld {
		t.Fatalf("duplicate's claim = %v, want held", held.Outcome)
	}
	_, err = l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: time.Minute})
	check("a renewal", err, []string{read, clock, commit}, runRead)
	_, err = l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"})
	check("an effect's begin", err, []string{read, read, commit}, fenceRead, effectRead)
	_, err = l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: f, Name: "charge"})
	check("an effect's completion", err, []string{read, read, commit}, fenceRead, effectRead)
	_, err = l.Complete(ctx, &ledger.CompleteParams{Fence: f})
	check("the run's completion", err, []string{read, commit}, runRead)
}
