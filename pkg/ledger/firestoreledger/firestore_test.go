package firestoreledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/google/uuid"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/ledgertest"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

const testProject = "runonce-test"

// emulator returns FIRESTORE_EMULATOR_HOST, skipping the test when it is unset, or
// failing it when CI=true (a broken CI setup must not turn into skipped tests).
func emulator(tb testing.TB) string {
	tb.Helper()
	host := os.Getenv("FIRESTORE_EMULATOR_HOST")
	if host == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("FIRESTORE_EMULATOR_HOST is not set, and CI=true: the Firestore emulator must run in CI (scripts/test.sh starts it)")
		}
		tb.Skip("set FIRESTORE_EMULATOR_HOST to run against the Firestore emulator (scripts/services.sh start DIR)")
	}
	return host
}

var shared struct {
	once   sync.Once
	client *firestore.Client
	err    error
}

// sharedClient is one client for the tests' ledgers; TestMain closes it.
func sharedClient(tb testing.TB) *firestore.Client {
	tb.Helper()
	emulator(tb)
	shared.once.Do(func() {
		shared.client, shared.err = firestore.NewClient(context.Background(), testProject)
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.client
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.client != nil {
		_ = shared.client.Close()
	}
	os.Exit(code)
}

// uniquePrefix isolates one test's ledger in the shared emulator.
func uniquePrefix() string { return "t" + strings.ReplaceAll(uuid.NewString(), "-", "") + "_" }

func openLedger(tb testing.TB, client *firestore.Client, opts *Options) *Ledger {
	tb.Helper()
	l, err := New(context.Background(), client, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

func newClient(tb testing.TB, opts ...option.ClientOption) *firestore.Client {
	tb.Helper()
	emulator(tb)
	c, err := firestore.NewClient(context.Background(), testProject, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

var harness = ledgertest.Harness{
	Open: func(tb testing.TB) ledger.Driver {
		return openLedger(tb, sharedClient(tb), &Options{Prefix: uniquePrefix()})
	},
	// A second process on the same collections: its own client, its clock skewed.
	SkewedClient: func(tb testing.TB, l ledger.Driver, skew func() time.Duration) ledger.Driver {
		return openLedger(tb, newClient(tb), &Options{
			Prefix: l.(*Ledger).Prefix(),
			Clock:  func() time.Time { return time.Now().Add(skew()) },
		})
	},
	SupportsNow: false,
	Operations:  true,
}

func TestConformance(t *testing.T) {
	emulator(t)
	ledgertest.Run(t, harness)
}

// rpcCounter counts the gRPC calls a client makes, by method, and keeps each write of a
// commit: the fields it sets (an update's mask, or a created document's fields) and the
// size of its commit request.
type rpcCounter struct {
	mu     sync.Mutex
	calls  []string
	writes ledgertest.WriteLog
	ops    ledgertest.Ops // documents written and read, for TestCapacityOps
}

func (c *rpcCounter) add(method string, req any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, method[strings.LastIndex(method, "/")+1:])
	if commit, ok := req.(*firestorepb.CommitRequest); ok {
		c.ops.Writes += len(commit.GetWrites())
		for _, w := range commit.GetWrites() {
			fields := w.GetUpdateMask().GetFieldPaths()
			if w.GetUpdateMask() == nil {
				fields = slices.Collect(maps.Keys(w.GetUpdate().GetFields()))
			}
			c.writes.Add(ledgertest.TransitionWrite{Fields: slices.Sorted(slices.Values(fields)), Bytes: proto.Size(commit)})
		}
	}
}

// take returns the calls counted since the last take.
func (c *rpcCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// sent counts the documents a streaming request reads: each one a BatchGetDocuments asks
// for, and one a query.
func (c *rpcCounter) sent(msg any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m := msg.(type) {
	case *firestorepb.BatchGetDocumentsRequest:
		c.ops.Reads += len(m.GetDocuments())
	case *firestorepb.RunQueryRequest:
		c.ops.Reads++
	}
}

// takeOps returns the documents written and read since the last takeOps.
func (c *rpcCounter) takeOps() ledgertest.Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = ledgertest.Ops{}
	return ops
}

// countedStream hands what a streaming RPC sends to its counter.
type countedStream struct {
	grpc.ClientStream
	counter *rpcCounter
}

func (s countedStream) SendMsg(m any) error {
	s.counter.sent(m)
	return s.ClientStream.SendMsg(m)
}

// emulatorCreds is what the client sends the emulator: the "owner" token bypasses
// security rules.
type emulatorCreds struct{}

func (emulatorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (emulatorCreds) RequireTransportSecurity() bool { return false }

// countingClient returns a client whose every unary and streaming RPC is counted. With
// FIRESTORE_EMULATOR_HOST set the client dials its own connection and ignores dial
// options, so the test dials one with the interceptors and hands it over.
func countingClient(t *testing.T) (*firestore.Client, *rpcCounter) {
	t.Helper()
	host := emulator(t)
	counter := &rpcCounter{}
	conn, err := grpc.NewClient("passthrough:///"+host,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(emulatorCreds{}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			counter.add(method, req)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			counter.add(method, nil)
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return countedStream{ClientStream: s, counter: counter}, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return newClient(t, option.WithGRPCConn(conn)), counter
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	l := openLedger(t, client, &Options{Prefix: uniquePrefix()})
	if got := counter.take(); len(got) != 1 || got[0] != "BatchGetDocuments" {
		t.Fatalf("New made %v, want one read (the clock probe)", got)
	}
	ctx := t.Context()
	id := ledger.KeyedRunID("ns", "job", uuid.NewString())
	ident := ledger.Identity{RunID: id, Namespace: "ns", Job: "job", Key: "k", PayloadHash: ledger.PayloadHash(nil)}

	check := func(what string, want ...string) {
		t.Helper()
		got := counter.take()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s made the RPCs %v, want exactly %v", what, got, want)
		}
		t.Logf("%s: %d RPC(s) %v", what, len(got), got)
	}

	res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
	if err != nil || !res.Created {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	check("the ingress claim of a new run", "Commit")

	dup, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
	if err != nil || dup.Created || dup.Run.AttemptID != res.Run.AttemptID {
		t.Fatalf("duplicate Claim = %+v, %v", dup, err)
	}
	check("a duplicate claim of a run this ledger created (one read)", "BatchGetDocuments")

	// Another process's ledger has not seen the run: its first duplicate is a rejected
	// Create and a read, then the run is known and its duplicates are one read each.
	other := openLedger(t, client, &Options{Prefix: l.Prefix()})
	counter.take()
	for i, want := range [][]string{{"Commit", "BatchGetDocuments"}, {"BatchGetDocuments"}} {
		dup, err := other.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
		if err != nil || dup.Created || dup.Run.AttemptID != res.Run.AttemptID {
			t.Fatalf("duplicate Claim %d through another ledger = %+v, %v", i, dup, err)
		}
		check(fmt.Sprintf("duplicate claim %d through a ledger that had not seen the run", i), want...)
	}

	// A known run swept since: the read finds nothing, and the claim creates it.
	gone := ledger.KeyedRunID("ns", "job", uuid.NewString())
	goneIdent := ledger.Identity{RunID: gone, Namespace: "ns", Job: "job", Key: "k2", PayloadHash: ledger.PayloadHash(nil)}
	if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: goneIdent, AttemptID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Collection(l.Prefix() + RunsCollection).Doc(gone).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	counter.take()
	again, err := l.Claim(ctx, &ledger.ClaimParams{Identity: goneIdent, AttemptID: uuid.NewString()})
	if err != nil || !again.Created {
		t.Fatalf("Claim of a known run deleted since = %+v, %v; want it created", again, err)
	}
	check("the claim of a known run deleted since (a read finds nothing, a Create)", "BatchGetDocuments", "Commit")

	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
	if err != nil || a.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	check("a worker claim", "BatchGetDocuments", "Commit")

	held, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
	if err != nil || held.Outcome != ledger.OutcomeHeld {
		t.Fatalf("second Acquire = %+v, %v", held, err)
	}
	check("a worker claim of a held run", "BatchGetDocuments")

	f := ledger.Fence{RunID: id, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	if _, err := l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check("a renewal of a run this ledger wrote last (a fenced write, no read)", "Commit")
	if _, err := l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check("a second renewal", "Commit")

	e, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"})
	if err != nil {
		t.Fatal(err)
	}
	// The transaction's read time is the effect's clock: the server's, after the claim.
	if d := e.Effect.UpdatedAt.Sub(a.Run.UpdatedAt); d < 0 || d > time.Minute {
		t.Fatalf("effect stamped %v, %v after the worker claim", e.Effect.UpdatedAt, d)
	}
	check("an effect write (a read, then a transaction of two fenced writes)", "BatchGetDocuments", "BeginTransaction", "Commit")

	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f}); err != nil {
		t.Fatal(err)
	}
	check("a completion after an effect write, which changed the run's update time (a read, a write)", "BatchGetDocuments", "Commit")

	// claimed and acquired through l, which wrote it last.
	acquired := func() ledger.Fence {
		t.Helper()
		ident := ledger.Identity{RunID: ledger.KeyedRunID("ns", "job", uuid.NewString()), Namespace: "ns", Job: "job", Key: "k3", PayloadHash: ledger.PayloadHash(nil)}
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()}); err != nil {
			t.Fatal(err)
		}
		a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
		if err != nil || a.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire = %+v, %v", a, err)
		}
		counter.take()
		return ledger.Fence{RunID: ident.RunID, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	}
	f = acquired()
	done, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f, Result: []byte(`{"ok":1}`)})
	if err != nil || done.Status != ledger.StatusCompleted {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	check("a completion of a run this ledger wrote last (a fenced write, no read)", "Commit")
	stored, err := l.Get(ctx, &ledger.GetParams{RunID: f.RunID})
	if err != nil || stored.Status != ledger.StatusCompleted || string(stored.Result) != `{"ok":1}` ||
		len(stored.History) != 3 || stored.History[2].Kind != ledger.EventCompleted {
		t.Fatalf("the run completed without a read: %+v, %v", stored, err)
	}
	counter.take()

	// Another process cancels the run: the holder's write, decided on what it wrote
	// last, fails its precondition, and the read says why.
	f = acquired()
	if _, err := other.Cancel(ctx, &ledger.OperatorParams{RunID: f.RunID, Actor: "op@example.com", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	counter.take()
	if _, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f}); !errors.Is(err, ledger.ErrLeaseLost) || !errors.Is(err, ledger.ErrCancelled) {
		t.Fatalf("Complete of a run another process cancelled = %v, want ErrLeaseLost wrapping ErrCancelled", err)
	}
	check("a completion of a run written since by another process (the write refused, a read)", "Commit", "BatchGetDocuments")
}

// TestCapacityOps measures a run's operations on the ledger in documents written (each
// write of a Commit) and read (each document a BatchGetDocuments asks for), and checks
// them against Firestore's row of docs/capacity.md.
func TestCapacityOps(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	l := openLedger(t, client, &Options{Prefix: uniquePrefix()})
	ledgertest.CheckCapacityTable(t, "Firestore", ledgertest.MeasureRunOps(t, l, counter.takeOps))
}

// TestTransitionsWriteWhatChanges checks that a transition's write sets only the fields
// of the run document that it changes (ledgertest.CheckTransitionWrites). It covers both
// kinds of write: a worker claim and a renewal through another ledger decide on a read;
// the holder's renewal and completion decide on the run as this ledger wrote it. The
// completion's first write is refused, because the other ledger wrote last, and it is
// then decided on a read.
func TestTransitionsWriteWhatChanges(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	l := openLedger(t, client, &Options{Prefix: uniquePrefix()})
	other := openLedger(t, client, &Options{Prefix: l.Prefix()})
	ledgertest.CheckTransitionWrites(t, l, other, counter.writes.Take,
		[]string{fieldPayload, "payload_hash", fieldNamespace, fieldJob, "key", "schedule_time", fieldCreatedAt})
}

// TestConcurrentTakeover races 64 worker claims, through two clients, on a run whose
// lease expired: exactly one takes it over; the others find it held or are told to
// retry (ledger.ErrContended), never another error.
func TestConcurrentTakeover(t *testing.T) {
	t.Parallel()
	a := openLedger(t, sharedClient(t), &Options{Prefix: uniquePrefix()})
	b := openLedger(t, newClient(t), &Options{Prefix: a.Prefix()})
	ctx := t.Context()
	id := ledger.KeyedRunID("ns", "job", uuid.NewString())
	ident := ledger.Identity{RunID: id, Namespace: "ns", Job: "job", Key: "k"}
	first, err := a.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Second})
	if err != nil || first.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire = %+v, %v", first, err)
	}
	// Wait until the lease expired by the server's clock (a read's ReadTime).
	for {
		snap, err := a.runs.Doc(clockProbeID).Get(ctx)
		if status.Code(err) != codes.NotFound {
			t.Fatal(err)
		}
		if snap.ReadTime.After(first.Run.Deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	const n = 64
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]*ledger.AcquireResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			<-start
			results[i], errs[i] = l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
		})
	}
	close(start)
	wg.Wait()
	var winner *ledger.Run
	contended := 0
	for i, r := range results {
		switch {
		case errors.Is(errs[i], ledger.ErrContended):
			contended++
		case errs[i] != nil:
			t.Fatalf("worker claim %d: %v; want a result or ledger.ErrContended", i, errs[i])
		case r.Outcome == ledger.OutcomeAcquired:
			if winner != nil {
				t.Fatalf("two worker claims took the run over: attempts %q and %q", winner.AttemptID, r.Run.AttemptID)
			}
			winner = r.Run
		case r.Outcome != ledger.OutcomeHeld:
			t.Fatalf("worker claim %d = %v, want acquired or held", i, r.Outcome)
		}
	}
	if winner == nil {
		t.Fatalf("none of %d worker claims took the expired lease over (%d contended)", n, contended)
	}
	got, err := a.Get(ctx, &ledger.GetParams{RunID: id})
	if err != nil || got.Attempt != 2 || got.AttemptID != winner.AttemptID || got.AttemptsMade != 1 {
		t.Fatalf("stored run = %+v, %v; want attempt 2 held by the winner %q", got, err, winner.AttemptID)
	}
	t.Logf("one winner, %d held, %d contended", n-1-contended, contended)
}

// TestConcurrentEffects races effect writes of one run with its holder's renewals, all
// fenced on the run document's update time: each call, given the few seconds a worker
// gives a renewal, reads again until it lands, so every one succeeds, and the holder
// keeps its run and its effect. (With the effect written in a transaction that read the
// run, the emulator made every renewal wait for its lock and fail after 2 s; with a
// fixed 5 rounds of reads, some 150 ms, renewals beaten by the effect writes failed
// ledger.ErrContended with seconds left.)
func TestConcurrentEffects(t *testing.T) {
	t.Parallel()
	l := openLedger(t, sharedClient(t), &Options{Prefix: uniquePrefix()})
	ctx := t.Context()
	id := ledger.KeyedRunID("ns", "job", uuid.NewString())
	a, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: id}, AttemptID: uuid.NewString(), Lease: time.Minute})
	if err != nil || a.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	f := ledger.Fence{RunID: id, Attempt: a.Run.Attempt, AttemptID: a.Run.AttemptID}
	const n = 8
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, errs[i] = l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"})
		})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, errs[n+i] = l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: time.Minute})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d (%s): %v; want it to land within its deadline", i, []string{"effect write", "renewal"}[i/n], err)
		}
	}
	// The holder still holds the run and records its effect.
	if _, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"}); err != nil {
		t.Fatalf("BeginEffect after the race: %v", err)
	}
	e, err := l.GetEffect(ctx, &ledger.GetEffectParams{RunID: id, Name: "charge"})
	if err != nil || e.Status != ledger.EffectPending || e.Attempt != f.Attempt {
		t.Fatalf("effect = %+v, %v; want pending at attempt %d", e, err, f.Attempt)
	}
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	emulator(t)
	ctx := t.Context()
	l, err := ledger.Open(ctx, "firestore://"+testProject+"?prefix="+uniquePrefix())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, ok := l.Driver().(*Ledger); !ok {
		t.Fatalf("Open returned a %T", l)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"firestore://proj":                 "proj (default) ",
		"firestore://proj/":                "proj (default) ",
		"firestore://proj/other-db":        "proj other-db ",
		"firestore://proj?prefix=staging_": "proj (default) staging_",
		"firestore://proj/db?prefix=p":     "proj db p",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		project, database, prefix, err := parseURL(u)
		if got := fmt.Sprintf("%s %s %s", project, database, prefix); err != nil || got != want {
			t.Errorf("parseURL(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for raw, wantErr := range map[string]string{
		"firestore://proj?collection=runs":     `unknown query parameter "collection"`,
		"firestore://proj?prefix=a&prefix=b":   "prefix given 2 times",
		"firestore://user:secret@proj":         "credentials come from the environment",
		"firestore:///db":                      "want a project ID",
		"firestore://proj/a/b":                 "not a database ID",
		"firestore://proj:8080":                "want a project ID",
		"firestore://proj?prefix=x&timeout=1s": `unknown query parameter "timeout"`,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := parseURL(u); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("parseURL(%s) error = %v, want one containing %q", raw, err, wantErr)
		}
	}
	// The opener refuses an unknown parameter before dialling anything.
	_, err := ledger.Open(t.Context(), "firestore://proj?colection=x")
	if err == nil || !strings.Contains(err.Error(), `"colection"`) {
		t.Errorf("Open with an unknown parameter: %v, want an error naming it", err)
	}
}

func TestNewRefusesBadPrefix(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	for _, p := range []string{"a/b", "__x", strings.Repeat("p", 101)} {
		if _, err := New(t.Context(), client, &Options{Prefix: p}); err == nil {
			t.Errorf("New with prefix %q succeeded", p)
		}
	}
}

func TestMapErr(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind rpc
		code codes.Code
		want error
	}{
		{rpcRead, codes.NotFound, ledger.ErrNotFound},
		{rpcWrite, codes.NotFound, errStale},
		{rpcCreate, codes.AlreadyExists, errExists},
		{rpcWrite, codes.FailedPrecondition, errStale},
		{rpcWrite, codes.FailedPrecondition, ledger.ErrConflict},
		{rpcWrite, codes.Aborted, ledger.ErrContended},
		{rpcRead, codes.Unavailable, ledger.ErrUnavailable},
		{rpcWrite, codes.DeadlineExceeded, ledger.ErrUnavailable},
		{rpcQuery, codes.ResourceExhausted, ledger.ErrUnavailable},
	} {
		native := status.Error(c.code, "native")
		err := mapErr(c.kind, native, "op %d", 1)
		if !errors.Is(err, c.want) || status.Code(err) != c.code || !strings.Contains(err.Error(), "op 1") {
			t.Errorf("mapErr(%v, %v) = %v; want it to wrap %v and the native error, with the operation", c.kind, c.code, err, c.want)
		}
		if ledger.Retryable(err) != (errors.Is(c.want, ledger.ErrContended) || errors.Is(c.want, ledger.ErrUnavailable)) {
			t.Errorf("mapErr(%v, %v) = %v: retryable %v", c.kind, c.code, err, ledger.Retryable(err))
		}
	}
	err := mapErr(rpcQuery, status.Error(codes.FailedPrecondition, "The query requires an index"), "list")
	if errors.Is(err, ledger.ErrConflict) || !strings.Contains(err.Error(), "index") {
		t.Errorf("a query's FailedPrecondition = %v; want a missing index named, not a conflict", err)
	}
	if mapErr(rpcRead, nil, "x") != nil {
		t.Error("mapErr(nil) != nil")
	}
}

// BenchmarkFirestore runs, in one go test -bench, the limit (a raw Create of a fresh
// document, the same fields the ingress claim writes) beside the conformance suite's
// benchmarks of this backend.
func BenchmarkFirestore(b *testing.B) {
	emulator(b)
	client := sharedClient(b)
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("RawCreate/goroutines=%d", n), func(b *testing.B) {
			coll := client.Collection(uniquePrefix() + "raw")
			doc := encodeRun(&ledger.Run{
				Namespace: "ledgertest/ns", Job: "job", Key: "sched-job", Status: ledger.StatusQueued,
				ScheduleTime: time.Now(), PayloadHash: ledger.PayloadHash(nil), Payload: []byte(`{"n":1}`), AttemptID: uuid.NewString(),
				Deadline: time.Now(), ExpireAt: time.Now(),
			})
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = ledger.KeyedRunID("bench", "raw", uuid.NewString())
			}
			benchloop.Run(b, n, func(ctx context.Context, i int) error {
				_, err := coll.Doc(ids[i]).Create(ctx, doc)
				return err
			})
		})
	}
	b.Run("Ledger", func(b *testing.B) { ledgertest.Benchmark(b, harness) })
	// The ratio the issue asks for, measured so that background load (other tests on
	// the machine, the emulator's garbage collector) hits both sides alike: the same
	// goroutines alternate raw Creates and new-run claims, one operation each.
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("ClaimNewVsRawCreate/goroutines=%d", n), func(b *testing.B) {
			benchPaired(b, client, n)
		})
	}
}

// benchPaired runs b.N operations on n goroutines, alternately a raw Create and a
// new-run claim, and reports each side's mean latency, the throughput n goroutines
// would reach with it alone (Little's law: n / mean latency), and their ratio.
func benchPaired(b *testing.B, client *firestore.Client, n int) {
	l := openLedger(b, client, &Options{Prefix: uniquePrefix()})
	raw := client.Collection(l.Prefix() + "raw")
	payload := []byte(`{"n":1}`)
	doc := encodeRun(&ledger.Run{Namespace: "ledgertest/ns", Job: "job", Key: "sched-job", Status: ledger.StatusQueued,
		ScheduleTime: time.Now(), PayloadHash: ledger.PayloadHash(payload), Payload: payload, AttemptID: uuid.NewString(),
		Deadline: time.Now(), ExpireAt: time.Now()})
	ids := make([]ledger.Identity, b.N)
	for i := range ids {
		ids[i] = ledger.Identity{
			RunID: ledger.KeyedRunID("bench", "job", uuid.NewString()), Namespace: "ledgertest/ns", Job: "job",
			Key: "sched-job", ScheduleTime: time.Now(), PayloadHash: ledger.PayloadHash(payload), Payload: payload,
		}
	}
	var spent, done [2]atomic.Int64
	benchloop.Run(b, n, func(ctx context.Context, i int) error {
		side := i % 2
		start := time.Now()
		var err error
		if side == 0 {
			_, err = raw.Doc(ids[i].RunID).Create(ctx, doc)
		} else {
			_, err = l.Claim(ctx, &ledger.ClaimParams{Identity: ids[i], AttemptID: uuid.NewString()})
		}
		spent[side].Add(int64(time.Since(start)))
		done[side].Add(1)
		return err
	})
	if done[0].Load() == 0 || done[1].Load() == 0 {
		return
	}
	mean := func(side int) time.Duration { return time.Duration(spent[side].Load() / done[side].Load()) }
	create := float64(n) / mean(0).Seconds()
	claim := float64(n) / mean(1).Seconds()
	b.ReportMetric(float64(mean(0).Microseconds()), "create-µs")
	b.ReportMetric(float64(mean(1).Microseconds()), "claim-µs")
	b.ReportMetric(create, "create-ops/s")
	b.ReportMetric(claim, "claim-ops/s")
	b.ReportMetric(claim/create, "claim/create")
}

// A payload that would take the run's document over Firestore's 1 MiB is refused with
// ledger.ErrTooLarge, and nothing is written: the ingress answers 413 for it.
func TestTooLargePayload(t *testing.T) {
	t.Parallel()
	l := openLedger(t, sharedClient(t), &Options{Prefix: uniquePrefix()})
	payload := []byte(strings.Repeat("x", 1<<20+1))
	id := ledger.KeyedRunID("ns", "job", "too-large")
	_, err := l.Claim(t.Context(), &ledger.ClaimParams{
		Identity:  ledger.Identity{RunID: id, Job: "job", PayloadHash: ledger.PayloadHash(payload), Payload: payload},
		AttemptID: uuid.NewString(),
	})
	if !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("Claim with a payload over 1 MiB: %v, want ledger.ErrTooLarge", err)
	}
	if _, err := l.Get(t.Context(), &ledger.GetParams{RunID: id}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused claim left a record: %v", err)
	}
}

// BenchmarkBatch measures a run of 10,000 items through worker.Batch beside the same
// items as one worker.Effect each (the raw effect write), on this backend: items/s and
// ledger writes per item (workertest.BenchmarkBatch).
func BenchmarkBatch(b *testing.B) { workertest.BenchmarkBatch(b, harness.Open) }

// BenchmarkDuplicateVsNew compares a duplicate claim with a new one
// (ledgertest.DuplicateVsNew): the raw write is a Create of a fresh document; a duplicate
// of a run this ledger created is one read, and dup-create-first takes it as a ledger
// that has not seen the run does (the rejected Create and a read: the former path).
func BenchmarkDuplicateVsNew(b *testing.B) {
	emulator(b)
	client := sharedClient(b)
	ledgertest.DuplicateVsNew(b, 200, func(b *testing.B) ledgertest.Duplicates {
		l := openLedger(b, client, &Options{Prefix: uniquePrefix()})
		raw := client.Collection(l.Prefix() + "raw")
		payload := []byte(`{"n":1}`)
		doc := encodeRun(&ledger.Run{Namespace: "ledgertest/ns", Job: "job", Key: "sched-job", Status: ledger.StatusQueued,
			ScheduleTime: time.Now(), PayloadHash: ledger.PayloadHash(payload), Payload: payload, AttemptID: uuid.NewString(),
			Deadline: time.Now(), ExpireAt: time.Now()})
		ident := func() ledger.Identity {
			return ledger.Identity{RunID: ledger.KeyedRunID("bench", "job", uuid.NewString()), Namespace: "ledgertest/ns",
				Job: "job", Key: "sched-job", ScheduleTime: time.Now(), PayloadHash: ledger.PayloadHash(payload), Payload: payload}
		}
		return ledgertest.Duplicates{Ledger: l, Identity: ident,
			Raw: func(ctx context.Context) error { _, err := raw.Doc(ident().RunID).Create(ctx, doc); return err },
			Others: func(hot ledger.Identity) []benchloop.Kind {
				return []benchloop.Kind{{Name: "dup-create-first", Op: func(ctx context.Context) error {
					ref := l.runs.Doc(hot.RunID)
					if _, err := ref.Create(ctx, doc); status.Code(err) != codes.AlreadyExists {
						return fmt.Errorf("create of the hot run: %v, want AlreadyExists", err)
					}
					_, err := l.readClaim(ctx, ref, &ledger.ClaimParams{Identity: hot, AttemptID: uuid.NewString()})
					return err
				}}}
			}}
	})
}
