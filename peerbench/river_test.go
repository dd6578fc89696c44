package peerbench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// BenchmarkRiverVsWorker alternates rounds, at concurrency 8 and 32, of River's worker
// and runonce's worker on the same PostgreSQL, each running a no-op job:
//
//   - river: a River client in its default configuration (river.Config with only
//     Queues, MaxWorkers the concurrency, and Workers set: a 100 ms fetch cooldown, a 1 s
//     poll, LISTEN/NOTIFY) over a pool of 32 connections, runonce's default. A round
//     inserts its jobs in one transaction (InsertManyTx, not timed) and times its commit,
//     which makes them available and notifies the client, until River reports every job
//     completed (EventKindJobCompleted, sent once the completion is written);
//   - river-fetch-1ms: the same with FetchCooldown at FetchCooldownMin, the setting
//     River's documentation names as what bounds its throughput;
//   - worker: runonce's worker on a PostgreSQL ledger opened from the plain URL, the
//     Pub/Sub emulator between them, on runs claimed first as the ingress does (the claims
//     not timed: the analogue of River's insert); a round times the publish of its
//     messages until the ledger has completed every run. It logs as River does by
//     default (river.Config.Logger: text at warn and above): a line per run at info would
//     be the benchmark's own cost.
//
// Every side first runs untimed rounds until the machine's CPU per job stops falling
// (benchloop.WarmUntilSteady). It reports each side's jobs/s, worker/river and
// worker/river-fetch-1ms, and each side's CPU per job. It needs TEST_DATABASE_URL and
// PUBSUB_EMULATOR_HOST.
func BenchmarkRiverVsWorker(b *testing.B) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" || os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST must be set under CI=true (scripts/services.sh)")
		}
		b.Skip("needs TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST (scripts/services.sh start DIR)")
	}
	const round = 500
	for _, conc := range []int{8, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			p := newPeers(b, dsn, conc)
			sides := []side{p.river("river", river.QueueDefault, 0), p.river("river-fetch-1ms", "fetch_1ms", river.FetchCooldownMin), p.worker("worker")}
			warmed := benchloop.WarmUntilSteady(b, func() int {
				for _, s := range sides {
					s.round(b, round)
				}
				return round * len(sides)
			})
			rate := rounds(b, round, sides)
			b.ReportMetric(float64(warmed), "warm-jobs")
			for _, s := range sides {
				b.ReportMetric(rate[s.name], s.name+"-jobs/s")
			}
			b.ReportMetric(rate["worker"]/rate["river"], "worker/river")
			b.ReportMetric(rate["worker"]/rate["river-fetch-1ms"], "worker/river-fetch-1ms")
		})
	}
}

// peers is one benchmark's services: a fresh schema that holds River's tables and
// runonce's ledger, and a topic and subscription on the Pub/Sub emulator.
type peers struct {
	b      *testing.B
	conc   int
	schema string
	pool   *pgxpool.Pool // River's: 32 connections, as runonce's default pool
	ledger ledger.Driver
}

const project = "peerbench"

func newPeers(b *testing.B, dsn string, conc int) *peers {
	ctx := b.Context()
	schema := "peerbench_" + randomHex()
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "32")
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		pool.Close()
	})
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatalf("River's migrations: %v", err)
	}
	q = u.Query()
	q.Del("pool_max_conns")
	q.Del("search_path")
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	l, err := ledger.OpenDriver(ctx, u.String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return &peers{b: b, conc: conc, schema: schema, pool: pool, ledger: l}
}

// side is one side of the benchmark: round runs n jobs on it and returns the time it
// timed and the CPU spent over that time.
type side struct {
	name  string
	round func(b *testing.B, n int) (time.Duration, benchloop.CPUMark)
}

// noopArgs is River's no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// river starts a River client working queue at the benchmark's concurrency, with
// cooldown as its FetchCooldown (0: River's default), and returns its side.
func (p *peers) river(name, queueName string, cooldown time.Duration) side {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(p.pool), &river.Config{
		Queues:        map[string]river.QueueConfig{queueName: {MaxWorkers: p.conc}},
		Workers:       workers,
		Schema:        p.schema,
		FetchCooldown: cooldown,
	})
	if err != nil {
		p.b.Fatal(err)
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 100_000})
	var done atomic.Int64
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for range events {
			done.Add(1)
		}
	}()
	if err := client.Start(p.b.Context()); err != nil {
		p.b.Fatal(err)
	}
	p.b.Cleanup(func() {
		ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		_ = client.Stop(ctx)
		cancel()
		<-stopped
	})
	return side{name: name, round: func(b *testing.B, n int) (time.Duration, benchloop.CPUMark) {
		ctx := b.Context()
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: queueName}}
		}
		want := done.Load() + int64(n)
		tx, err := p.pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
			b.Fatal(err)
		}
		m := benchloop.MarkCPU()
		t0 := time.Now()
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		wait(b, name, &done, want)
		return time.Since(t0), m
	}}
}

// completions counts the runs a ledger completes.
type completions struct {
	ledger.Driver
	n atomic.Int64
}

func (c *completions) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	r, err := c.Driver.Complete(ctx, p)
	if err == nil {
		c.n.Add(1)
	}
	return r, err
}

// worker starts a runonce worker on the benchmark's ledger and a subscription of its
// own, and returns its side.
func (p *peers) worker(name string) side {
	ctx := p.b.Context()
	c, err := queue.NewClient(ctx, project, nil)
	if err != nil {
		p.b.Fatal(err)
	}
	p.b.Cleanup(func() { c.Close() })
	topic := p.schema + "-" + name
	if _, err := queue.EnsureTopic(ctx, c, topic); err != nil {
		p.b.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, c, topic, topic, nil); err != nil {
		p.b.Fatal(err)
	}
	mux := worker.NewMux()
	mux.HandleFunc("noop", func(context.Context, *worker.Job) error { return nil })
	cl := &completions{Driver: p.ledger}
	w, err := worker.New(&worker.Config{Ledger: ledger.New(cl, nil), Handler: mux, Subscriber: queue.NewSubscriber(c, topic, nil),
		Concurrency: p.conc, Grace: time.Second, Logger: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		p.b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(rctx) }()
	p.b.Cleanup(func() { cancel(); <-errc })
	pub := queue.NewPublisher(c, topic, nil)
	p.b.Cleanup(func() { _ = pub.Close() })
	return side{name: name, round: func(b *testing.B, n int) (time.Duration, benchloop.CPUMark) {
		msgs := p.claimed(b, n)
		want := cl.n.Load() + int64(n)
		m := benchloop.MarkCPU()
		t0 := time.Now()
		res := make(chan error, n)
		for _, msg := range msgs {
			go func() {
				_, err := pub.Publish(ctx, msg)
				res <- err
			}()
		}
		for range msgs {
			if err := <-res; err != nil {
				b.Fatal(err)
			}
		}
		wait(b, name, &cl.n, want)
		return time.Since(t0), m
	}}
}

// claimed returns the messages of n new runs of the no-op job, each claimed first as the
// ingress claims it, 32 at a time.
func (p *peers) claimed(b *testing.B, n int) []*queue.Message {
	msgs := make([]*queue.Message, n)
	res := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range msgs {
		key := uuid.NewString()
		payload := []byte("{}")
		msgs[i] = &queue.Message{Identity: ledger.Identity{
			RunID: ledger.KeyedRunID("ns", "noop", key), Namespace: "ns", Job: "noop", Key: key,
			PayloadHash: ledger.PayloadHash(payload), Payload: payload,
		}, EnqueuedAt: time.Now()}
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := p.ledger.Claim(b.Context(), &ledger.ClaimParams{Identity: msgs[i].Identity, AttemptID: uuid.NewString()})
			res <- err
		}()
	}
	for range n {
		if err := <-res; err != nil {
			b.Fatal(err)
		}
	}
	return msgs
}

// wait waits until done reaches want.
func wait(b *testing.B, name string, done *atomic.Int64, want int64) {
	for deadline := time.Now().Add(5 * time.Minute); done.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d jobs of %d done in 5m", name, done.Load(), want)
		}
	}
}

// rounds runs b.N jobs on every side, in rounds of round jobs, each round starting with
// the next side, and returns each side's jobs/s by name; it reports each side's CPU per
// job (NAME-cpu-us/op, NAME-machine-cpu-us/op).
func rounds(b *testing.B, round int, sides []side) map[string]float64 {
	took := make([]time.Duration, len(sides))
	cpu := make([]benchloop.CPUSpent, len(sides))
	jobs := 0
	b.ResetTimer()
	for r := 0; jobs < b.N; r++ {
		n := min(round, b.N-jobs)
		for k := range sides {
			i := (r + k) % len(sides)
			d, m := sides[i].round(b, n)
			cpu[i].AddSince(m)
			took[i] += d
		}
		jobs += n
	}
	b.StopTimer()
	rates := make(map[string]float64, len(sides))
	for i, s := range sides {
		rates[s.name] = float64(jobs) / took[i].Seconds()
		cpu[i].Report(b, s.name, jobs)
	}
	return rates
}

func randomHex() string {
	var r [5]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}
