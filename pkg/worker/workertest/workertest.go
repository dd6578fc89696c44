// Package workertest runs a job's handler the way a worker does, against an in-memory
// ledger and without Pub/Sub, so that users test their jobs — outcomes, retries, the
// effects they record and the keys they pass downstream — without building run
// identities, messages or a ledger by hand. River's rivertest is the model.
//
//	h := workertest.New(t, nil)
//	h.Mux.HandleFunc("send-invoice", sendInvoice)
//	res := h.Deliver("send-invoice", "2026-11", []byte(`{"customer":"c-1"}`))
//	if res.Outcome != worker.OutcomeCompleted || !res.Effects["charge"].Done { … }
//
// Each Deliver of the same job and key is another delivery of the same run, as a retry
// or a duplicate from Pub/Sub would be: a run released for a retry runs again (at once:
// the harness moves its ledger's clock past a Retry-After), and effects an earlier attempt finished are skipped.
package workertest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// Namespace is the namespace of the runs the harness makes.
const Namespace = "workertest"

// Options configure a Harness. The zero value is ready to use.
type Options struct {
	// Config is the worker's configuration; Ledger and Handler are the harness's. Zero
	// fields mean the worker's defaults, except MaxAttempts (default 3).
	Config worker.Config
	// Now replaces the ledger's clock (see memory.Options.Clock). Defaults to time.Now.
	Now func() time.Time
}

// Harness is one worker over an in-memory ledger. Register handlers on Mux before the
// first Deliver.
type Harness struct {
	tb     testing.TB
	Mux    *worker.Mux
	Ledger *ledger.Ledger
	w      *worker.Worker
	rec    *recorder
	clock  func() time.Time
	// offset moves the ledger's clock past retry delays.
	offset atomic.Int64
}

func (h *Harness) now() time.Time { return h.clock().Add(time.Duration(h.offset.Load())) }

// New returns a harness; the worker's running jobs are cancelled when the test ends. A
// nil tb (outside a test, as in an example) makes a failure panic.
func New(tb testing.TB, o *Options) *Harness {
	if tb == nil {
		tb = panicTB{}
	}
	tb.Helper()
	if o == nil {
		o = &Options{}
	}
	h := &Harness{tb: tb, Mux: worker.NewMux(), clock: o.Now}
	if h.clock == nil {
		h.clock = time.Now
	}
	mem := memory.New(&memory.Options{Clock: h.now})
	h.Ledger = ledger.New(mem, nil)
	h.rec = &recorder{Driver: mem, begun: map[string][]string{}}
	cfg := o.Config
	cfg.Ledger, cfg.Handler = ledger.New(h.rec, nil), h.Mux
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	w, err := worker.New(&cfg)
	if err != nil {
		tb.Fatalf("workertest: %v", err)
	}
	h.w = w
	tb.Cleanup(w.CancelJobs)
	return h
}

// Result is what one delivery came to.
type Result struct {
	// Outcome is the delivery's outcome (worker.OutcomeCompleted, OutcomeFailed,
	// OutcomeReleased, OutcomeTerminal, …) and Ack whether the message would be acked.
	Outcome string
	Ack     bool
	// Run is the run's record after the delivery.
	Run *ledger.Run
	// Effects are the run's effect records by effect name, each attempt's included.
	Effects map[string]*ledger.Effect
}

// Deliver delivers one message for the run of job keyed by key (an Idempotency-Key)
// with payload, and returns what it came to. It fails the test when the ledger cannot be
// read afterwards.
func (h *Harness) Deliver(job, key string, payload []byte) *Result {
	h.tb.Helper()
	return h.deliver(ledger.Identity{
		RunID: ledger.KeyedRunID(Namespace, job, key), Namespace: Namespace, Job: job, Key: key,
	}, payload)
}

// DeliverScheduled is Deliver for a run keyed like a Cloud Scheduler call: the scheduler's
// job name and the schedule time.
func (h *Harness) DeliverScheduled(job, schedulerJob string, at time.Time, payload []byte) *Result {
	h.tb.Helper()
	at = at.UTC()
	return h.deliver(ledger.Identity{
		RunID: ledger.ScheduledRunID(Namespace, job, schedulerJob, at), Namespace: Namespace, Job: job,
		Key: schedulerJob, ScheduleTime: at,
	}, payload)
}

func (h *Harness) deliver(id ledger.Identity, payload []byte) *Result {
	h.tb.Helper()
	id.PayloadHash = ledger.PayloadHash(payload)
	id.Payload = payload
	ctx := context.Background()
	if t, ok := h.tb.(*testing.T); ok {
		ctx = t.Context()
	}
	// A retry may be delayed (Retry-After); the harness runs it at once, by moving its
	// ledger's clock past the delay.
	if r, err := h.Ledger.Get(ctx, &ledger.GetParams{RunID: id.RunID}); err == nil && r.Status == ledger.StatusQueued {
		if wait := r.NotBefore.Sub(h.now()); wait > 0 {
			h.offset.Add(int64(wait + time.Millisecond))
		}
	}
	v := h.w.Process(ctx, &queue.Delivery{
		Message:     &queue.Message{Identity: id, EnqueuedAt: time.Now()},
		PublishTime: time.Now(),
	})
	run, err := h.Ledger.Get(ctx, &ledger.GetParams{RunID: id.RunID})
	if err != nil {
		h.tb.Fatalf("workertest: read run %s after the delivery: %v", id.RunID, err)
	}
	res := &Result{Outcome: v.Outcome, Ack: v.Ack, Run: run, Effects: map[string]*ledger.Effect{}}
	for _, name := range h.rec.names(id.RunID) {
		e, err := h.Ledger.GetEffect(ctx, &ledger.GetEffectParams{RunID: id.RunID, Name: name})
		if err != nil {
			h.tb.Fatalf("workertest: read effect %q of run %s: %v", name, id.RunID, err)
		}
		res.Effects[name] = e
	}
	return res
}

// Done reports whether the effect is recorded as done.
func Done(e *ledger.Effect) bool { return e != nil && e.Status == ledger.EffectDone }

// recorder notes the names of the effects each run begins, so that a Result can list them.
type recorder struct {
	ledger.Driver
	mu    sync.Mutex
	begun map[string][]string
}

func (r *recorder) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	res, err := r.Driver.BeginEffect(ctx, p)
	if err == nil {
		r.mu.Lock()
		names := r.begun[p.RunID]
		if i := sort.SearchStrings(names, p.Name); i == len(names) || names[i] != p.Name {
			names = append(names, p.Name)
			sort.Strings(names)
			r.begun[p.RunID] = names
		}
		r.mu.Unlock()
	}
	return res, err
}

func (r *recorder) names(runID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.begun[runID]...)
}

// panicTB stands for a test outside one: a failure panics.
type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Cleanup(func())                    {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
