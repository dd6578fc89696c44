package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/ledgertest"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

func open(tb testing.TB, path string) *sqlite.Ledger {
	tb.Helper()
	l, err := sqlite.Open(tb.Context(), path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

func harness() ledgertest.Harness {
	return ledgertest.Harness{
		Open: func(tb testing.TB) ledger.Driver {
			return open(tb, filepath.Join(tb.TempDir(), "ledger.db"))
		},
		SupportsNow: true,
		Operations:  true,
	}
}

func TestConformance(t *testing.T) { ledgertest.Run(t, harness()) }

func BenchmarkLedger(b *testing.B) { ledgertest.Benchmark(b, harness()) }

func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(t.Context(), "sqlite://"+filepath.Join(dir, "a.db")+"?busy_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, bad := range []string{"sqlite://host/x.db", "sqlite://", "sqlite:///x.db?cache=shared", "sqlite:///x.db?busy_timeout=often"} {
		if _, err := ledger.Open(t.Context(), bad); err == nil || !strings.Contains(err.Error(), "sqlite") {
			t.Errorf("Open(%q) = %v, want an error naming the URL", bad, err)
		}
	}
}

func TestSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := t.Context()
	id := ledger.KeyedRunID("ns", "job", "restart")
	l := open(t, path)
	res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, Job: "job"}, AttemptID: uuid.NewString()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: ledger.Fence{RunID: id, Attempt: 1, AttemptID: res.Run.AttemptID}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = open(t, path)
	got, err := l.Get(ctx, &ledger.GetParams{RunID: id})
	if err != nil || got.Status != ledger.StatusCompleted {
		t.Fatalf("after a restart: %v, %v; want the completed run", got, err)
	}
}

// The two-process test: this test binary, started again as a child with
// RUNONCE_SQLITE_CHILD set, races the parent on the same keys in the same file.
const childEnv = "RUNONCE_SQLITE_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		if err := child(spec); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const keysPerProcess = 600

// child claims and acquires every key, printing "claim ID" and "acquire ID" for each win.
func child(spec string) error {
	path, who, _ := strings.Cut(spec, "|")
	ctx := context.Background()
	l, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	// Tell the parent the file is open, and start racing when it says go.
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	return race(ctx, l, who, func(line string) { fmt.Fprintln(out, line) })
}

func race(ctx context.Context, l ledger.Driver, who string, win func(string)) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < keysPerProcess; i += 8 {
				// The processes go through the keys in opposite orders, so that each
				// wins some even if the other starts first, and they meet in the middle.
				k := i
				if strings.HasPrefix(who, "child") {
					k = keysPerProcess - 1 - i
				}
				id := ledger.KeyedRunID("two-processes", "job", fmt.Sprint(k))
				ident := ledger.Identity{RunID: id, Job: "job"}
				c, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: who + uuid.NewString()})
				if err != nil {
					errs <- err
					return
				}
				a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: who + uuid.NewString(), Lease: time.Hour})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if c.Created {
					win("claim " + id)
				}
				if a.Outcome == ledger.OutcomeAcquired {
					win("acquire " + id)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}

func TestTwoProcessesShareOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	ctx := t.Context()
	// Both processes open a new file at once: the migration must not race either.
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path+"|child-")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := open(t, path)
	childReader := bufio.NewReader(stdout)
	if line, err := childReader.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	var childOut strings.Builder
	copied := make(chan struct{})
	go func() { io.Copy(&childOut, childReader); close(copied) }()
	fmt.Fprintln(stdin, "go")
	var parentWins []string
	if err := race(ctx, l, "parent-", func(s string) { parentWins = append(parentWins, s) }); err != nil {
		t.Fatal(err)
	}
	<-copied
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child process: %v", err)
	}
	claims, acquires := 0, 0
	for k := range keysPerProcess {
		id := ledger.KeyedRunID("two-processes", "job", fmt.Sprint(k))
		c, a := countWins(parentWins, childOut.String(), "claim "+id), countWins(parentWins, childOut.String(), "acquire "+id)
		if c != 1 || a != 1 {
			t.Fatalf("key %d: %d claims and %d acquires won across two processes, want exactly 1 each", k, c, a)
		}
		claims += c
		acquires += a
		r, err := l.Get(ctx, &ledger.GetParams{RunID: id})
		if err != nil || r.Attempt != 1 || r.Status != ledger.StatusRunning {
			t.Fatalf("key %d: %+v, %v; want running at attempt 1", k, r, err)
		}
	}
	childWon := strings.Count(childOut.String(), "\n")
	// Both processes went through every key at once (the child started on the parent's
	// "go"); one may still win every race, as a busy writer can starve the other's
	// busy-timeout polling: the split is reported, the single winner per key is checked.
	t.Logf("%d keys: %d claims, %d acquires; the child won %d, the parent %d", keysPerProcess, claims, acquires, childWon, len(parentWins))
}

func countWins(parent []string, child, line string) int {
	n := strings.Count(child, line+"\n")
	for _, p := range parent {
		if p == line {
			n++
		}
	}
	return n
}

// A committed Complete must survive a power loss before its message is acked: in WAL
// mode that takes synchronous=FULL (NORMAL syncs only at checkpoints). NORMAL is only
// what the URL asks for.
func TestCommitsAreSyncedToDisk(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		query string
		want  int
	}{{"", 2}, {"?synchronous=full", 2}, {"?synchronous=normal", 1}} {
		l, err := ledger.Open(t.Context(), "sqlite://"+filepath.Join(dir, "s.db")+c.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sqlite.Synchronous(t.Context(), l.Driver().(*sqlite.Ledger))
		l.Close()
		if err != nil || got != c.want {
			t.Fatalf("%q: PRAGMA synchronous = %d, %v; want %d", c.query, got, err, c.want)
		}
	}
	if _, err := ledger.Open(t.Context(), "sqlite://"+filepath.Join(dir, "s.db")+"?synchronous=off"); err == nil {
		t.Fatal("synchronous=off was accepted")
	}
}

// TestConcurrentOpenMigrates opens one new file from several ledgers at once, as
// processes that start together do: each migrates it in an immediate transaction or
// finds it migrated, and all of them open.
func TestConcurrentOpenMigrates(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	ledgertest.CheckConcurrentOpens(t, 4, func(ctx context.Context) (ledger.Driver, error) { return sqlite.Open(ctx, path, nil) })
}

// BenchmarkDuplicateVsNew compares a duplicate claim with a new one
// (ledgertest.DuplicateVsNew) on one ledger file: a duplicate is a read outside the write
// lock, and dup-locked takes it through the write transaction (Claim as it was before).
func BenchmarkDuplicateVsNew(b *testing.B) {
	ledgertest.DuplicateVsNew(b, 400, func(b *testing.B) ledgertest.Duplicates {
		l := open(b, filepath.Join(b.TempDir(), "ledger.db"))
		return ledgertest.Duplicates{Ledger: l,
			Identity: func() ledger.Identity {
				key := uuid.NewString()
				return ledger.Identity{RunID: ledger.KeyedRunID("bench", "job", key), Namespace: "bench", Job: "job", Key: key,
					PayloadHash: ledger.PayloadHash([]byte(`{"n":1}`)), Payload: []byte(`{"n":1}`)}
			},
			Others: func(hot ledger.Identity) []benchloop.Kind {
				return []benchloop.Kind{{Name: "dup-locked", Op: func(ctx context.Context) error {
					_, err := sqlite.ClaimLocked(ctx, l, &ledger.ClaimParams{Identity: hot, AttemptID: uuid.NewString()})
					return err
				}}}
			}}
	})
}

// TestDuplicateClaimTakesNoWriteLock holds the ledger's write lock (as a writer waiting for
// its commit's fsync does) and requires a duplicate claim to answer meanwhile.
func TestDuplicateClaimTakesNoWriteLock(t *testing.T) {
	t.Parallel()
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"))
	id := ledger.Identity{RunID: ledger.KeyedRunID("ns", "job", "k"), Namespace: "ns", Job: "job", Key: "k", PayloadHash: "h"}
	if _, err := l.Claim(t.Context(), &ledger.ClaimParams{Identity: id, AttemptID: "first"}); err != nil {
		t.Fatal(err)
	}
	unlock := sqlite.LockWrites(l)
	defer unlock()
	done := make(chan error, 1)
	go func() {
		res, err := l.Claim(t.Context(), &ledger.ClaimParams{Identity: id, AttemptID: "second"})
		if err == nil && (res.Created || res.Run.AttemptID != "first") {
			err = fmt.Errorf("duplicate Claim = %+v, want the first claim's run, not created", res)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		unlock()
		<-done
		t.Fatal("a duplicate claim waited for the write lock")
	}
}

// TestGroupCommit: the writes that queue while the write lock is held run in one
// transaction once it is free, each with its own answer: new claims are created, an
// Acquire of a run that does not exist fails alone (its savepoint rolled back, the
// others kept), and a write whose context ended while it waited is not run.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"))
	identity := func(k string) ledger.Identity {
		return ledger.Identity{RunID: ledger.KeyedRunID("ns", "job", k), Namespace: "ns", Job: "job", Key: k, PayloadHash: "h"}
	}
	unlock := sqlite.LockWrites(l)
	defer unlock()
	before := sqlite.Commits(l)
	const claims = 10
	errs := make(chan error, claims+2)
	for i := range claims {
		go func() {
			res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: identity(fmt.Sprint("k", i)), AttemptID: "a"})
			if err == nil && !res.Created {
				err = fmt.Errorf("claim k%d not created: %+v", i, res)
			}
			errs <- err
		}()
	}
	go func() {
		_, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: identity("missing"), AttemptID: "w", MustExist: true})
		if !errors.Is(err, ledger.ErrNotFound) {
			errs <- fmt.Errorf("Acquire of a missing run in a batch: %v, want ErrNotFound", err)
			return
		}
		errs <- nil
	}()
	gone, cancel := context.WithCancel(ctx)
	go func() {
		_, err := l.Claim(gone, &ledger.ClaimParams{Identity: identity("cancelled"), AttemptID: "a"})
		if !errors.Is(err, context.Canceled) {
			errs <- fmt.Errorf("Claim whose context ended while it waited: %v, want context.Canceled", err)
			return
		}
		errs <- nil
	}()
	for deadline := time.Now().Add(10 * time.Second); sqlite.Queued(l) < claims+2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued behind the write lock, want %d", sqlite.Queued(l), claims+2)
		}
	}
	cancel()
	unlock()
	for range claims + 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := sqlite.Commits(l) - before; n != 1 {
		t.Errorf("%d transactions for %d queued writes, want 1 (group commit)", n, claims+2)
	}
	for i := range claims {
		if _, err := l.Get(ctx, &ledger.GetParams{RunID: identity(fmt.Sprint("k", i)).RunID}); err != nil {
			t.Errorf("claim k%d answered created but not stored: %v", i, err)
		}
	}
	if _, err := l.Get(ctx, &ledger.GetParams{RunID: identity("cancelled").RunID}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the cancelled claim was stored: %v", err)
	}
}

// BenchmarkBatch measures a run of 10,000 items through worker.Batch beside the same
// items as one worker.Effect each (the raw effect write), on this backend: items/s and
// ledger writes per item (workertest.BenchmarkBatch).
func BenchmarkBatch(b *testing.B) { workertest.BenchmarkBatch(b, harness().Open) }

// TestCapacityOps measures a run's operations on the ledger (write transactions, from the
// ledger's count of commits; reads outside them, from its count of reads) and checks them
// against SQLite's row of docs/capacity.md.
func TestCapacityOps(t *testing.T) {
	t.Parallel()
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"))
	var commits, reads int64
	got := ledgertest.MeasureRunOps(t, l, func() ledgertest.Ops {
		c, r := sqlite.Commits(l), sqlite.Reads(l)
		ops := ledgertest.Ops{Writes: int(c - commits), Reads: int(r - reads)}
		commits, reads = c, r
		return ops
	})
	ledgertest.CheckCapacityTable(t, "SQLite", got)
}
