package worker_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// chainBench is what the worker-against-chain benchmarks share: one Pub/Sub client, a
// topic and a subscription per side (named SIDE-t-ID and SIDE-s-ID), the ledger whose runs
// the workers claim and the benchmark's concurrency.
type chainBench struct {
	b    *testing.B
	c    *pubsub.Client
	l    ledger.Driver
	id   string
	conc int
}

// newChainBench makes the topics and subscriptions of sides on project's emulator.
func newChainBench(b *testing.B, project string, l ledger.Driver, conc int, sides ...string) *chainBench {
	ctx := b.Context()
	c, err := queue.NewClient(ctx, project, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	h := &chainBench{b: b, c: c, l: l, id: randomHex(), conc: conc}
	for _, side := range sides {
		if _, err := queue.EnsureTopic(ctx, c, side+"-t-"+h.id); err != nil {
			b.Fatal(err)
		}
		if _, err := queue.EnsureSubscription(ctx, c, side+"-t-"+h.id, side+"-s-"+h.id, nil); err != nil {
			b.Fatal(err)
		}
	}
	return h
}

// messages returns n messages of new runs; with claimed, their runs are claimed first, as
// the ingress does (not timed).
func (h *chainBench) messages(n int, claimed bool) []*queue.Message {
	msgs := make([]*queue.Message, n)
	res := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range msgs {
		msgs[i] = message("noop", uuid.NewString(), "{}")
		go func() {
			var err error
			if claimed {
				sem <- struct{}{}
				_, err = h.l.Claim(h.b.Context(), &ledger.ClaimParams{Identity: msgs[i].Identity, AttemptID: uuid.NewString()})
				<-sem
			}
			res <- err
		}()
	}
	for range n {
		if err := <-res; err != nil {
			h.b.Fatal(err)
		}
	}
	return msgs
}

// publish publishes msgs to side's topic, all at once, and waits for them.
func (h *chainBench) publish(side string, msgs []*queue.Message) {
	pub := queue.NewPublisher(h.c, side+"-t-"+h.id, nil)
	defer pub.Close()
	res := make(chan error, len(msgs))
	for _, m := range msgs {
		go func() {
			_, err := pub.Publish(h.b.Context(), m)
			res <- err
		}()
	}
	for range msgs {
		if err := <-res; err != nil {
			h.b.Fatal(err)
		}
	}
}

// start runs receive until the benchmark ends.
func (h *chainBench) start(receive func(ctx context.Context) error) {
	rctx, cancel := context.WithCancel(h.b.Context())
	errc := make(chan error, 1)
	go func() { errc <- receive(rctx) }()
	h.b.Cleanup(func() { cancel(); <-errc })
}

// wait waits until done reaches want.
func (h *chainBench) wait(want int64, done *atomic.Int64) {
	deadline := time.After(2 * time.Minute)
	for done.Load() < want {
		select {
		case <-deadline:
			h.b.Fatalf("%d of %d done in 2m", done.Load(), want)
		case <-time.After(time.Millisecond):
		}
	}
}

// worker starts a worker running a no-op job from side's subscription; the returned
// ledger counts its calls and completions.
func (h *chainBench) worker(side string) *countingLedger {
	mux := worker.NewMux()
	mux.HandleFunc("noop", func(context.Context, *worker.Job) error { return nil })
	cl := &countingLedger{Driver: h.l, done: make(chan struct{}), want: -1}
	w, err := worker.New(&worker.Config{Ledger: ledger.New(cl, nil), Handler: mux, Subscriber: queue.NewSubscriber(h.c, side+"-s-"+h.id, nil),
		Concurrency: h.conc, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.b.Fatal(err)
	}
	h.start(w.Run)
	return cl
}

// chain receives side's subscription at the benchmark's concurrency, running step on
// each message's run ID and acking it after (nacking it when step fails); done counts
// the acks.
func (h *chainBench) chain(side string, step func(ctx context.Context, key string) error, done *atomic.Int64) {
	sub := queue.NewSubscriber(h.c, side+"-s-"+h.id, &queue.SubscriberOptions{Concurrency: h.conc})
	h.start(func(ctx context.Context) error {
		return sub.Receive(ctx, nil, func(ctx context.Context, r *queue.Delivery) {
			if err := step(ctx, r.Message.Identity.RunID); err != nil {
				r.Nack()
				return
			}
			r.Ack()
			done.Add(1)
		})
	})
}

// round publishes n messages of new runs to side name and waits until done reaches want. It
// returns the time from the publish, or, for unclaimed runs, from making the messages,
// and adds the CPU spent over that time to cpu.
func (h *chainBench) round(name string, n int, claimed bool, done *atomic.Int64, want int64, cpu *benchloop.CPUSpent) time.Duration {
	var msgs []*queue.Message
	if claimed {
		msgs = h.messages(n, true)
	}
	defer cpu.AddSince(benchloop.MarkCPU())
	t0 := time.Now()
	if !claimed {
		msgs = h.messages(n, false)
	}
	h.publish(name, msgs)
	h.wait(want, done)
	return time.Since(t0)
}

// side is one side of a worker-against-chain benchmark: its name (its topic's and
// subscription's), whether its runs are claimed first, as the ingress does, and the count
// its finished jobs add to.
type side struct {
	name    string
	claimed bool
	done    *atomic.Int64
}

// rounds runs b.N jobs on every side, in rounds of round jobs, and returns each side's
// rate in jobs/s by name, reporting each side's CPU per job as benchloop.Interleaved does
// (NAME-cpu-us/op, NAME-machine-cpu-us/op: on a saturated machine, where its rate went).
// Each round starts with the next side, so that no side always runs right after the same
// other one (a side pays for the writes the one before it left the database to flush).
// Jobs the sides did before (warm's) are not counted.
func (h *chainBench) rounds(round int, sides ...side) map[string]float64 {
	took := make([]time.Duration, len(sides))
	cpu := make([]benchloop.CPUSpent, len(sides))
	base := make([]int64, len(sides)) // each side's jobs done before the timed rounds
	for i, s := range sides {
		base[i] = s.done.Load()
	}
	jobs := 0
	h.b.ResetTimer()
	for r, done := 0, 0; done < h.b.N; r, done = r+1, done+round {
		n := min(round, h.b.N-done)
		for k := range sides {
			i := (r + k) % len(sides)
			took[i] += h.round(sides[i].name, n, sides[i].claimed, sides[i].done, base[i]+int64(jobs+n), &cpu[i])
		}
		jobs += n
	}
	h.b.StopTimer()
	rates := make(map[string]float64, len(sides))
	for i, s := range sides {
		rates[s.name] = float64(jobs) / took[i].Seconds()
		cpu[i].Report(h.b, s.name, jobs)
	}
	return rates
}

// warm runs untimed rounds of round jobs of every side until the emulators have stopped
// getting faster (benchloop.WarmUntilSteady), and returns how many jobs they ran: the
// first rounds on a JVM emulator measure its warm-up more than either side.
func (h *chainBench) warm(round int, sides ...side) int {
	var untimed benchloop.CPUSpent
	return benchloop.WarmUntilSteady(h.b, func() int {
		for _, s := range sides {
			h.round(s.name, round, s.claimed, s.done, s.done.Load()+int64(round), &untimed)
		}
		return round * len(sides)
	})
}
