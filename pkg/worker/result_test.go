package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/worker"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

func TestResult(t *testing.T) {
	t.Parallel()

	t.Run("StoredAtCompleteAndNotRecomputed", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		var calls atomic.Int32
		h.Mux.HandleFunc("invoice", func(ctx context.Context, j *worker.Job) error {
			n := calls.Add(1)
			return worker.SetResult(ctx, map[string]any{"invoice": "inv-7", "call": n})
		})
		first := h.Deliver("invoice", "k", nil)
		if first.Outcome != worker.OutcomeCompleted || string(first.Run.Result) != `{"call":1,"invoice":"inv-7"}` {
			t.Fatalf("first delivery = %s with result %s; want completed with the handler's result", first.Outcome, first.Run.Result)
		}
		again := h.Deliver("invoice", "k", nil)
		if again.Outcome != worker.OutcomeTerminal || string(again.Run.Result) != string(first.Run.Result) || calls.Load() != 1 {
			t.Fatalf("duplicate = %s with result %s after %d calls; want terminal, the first result, one call", again.Outcome, again.Run.Result, calls.Load())
		}
	})

	t.Run("OverTheLimitIsRefusedAndTheRunCompletesWithoutIt", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		var setErr error
		h.Mux.HandleFunc("big", func(ctx context.Context, j *worker.Job) error {
			setErr = worker.SetResult(ctx, strings.Repeat("x", worker.MaxResult))
			return nil
		})
		r := h.Deliver("big", "k", nil)
		if !errors.Is(setErr, worker.ErrResultTooLarge) || !strings.Contains(setErr.Error(), fmt.Sprintf("the limit is %d", worker.MaxResult)) {
			t.Fatalf("SetResult over the limit = %v; want ErrResultTooLarge naming the limit", setErr)
		}
		if r.Outcome != worker.OutcomeCompleted || r.Run.Result != nil {
			t.Fatalf("run = %s with result %q; want completed without a result (the handler returned nil)", r.Outcome, r.Run.Result)
		}
	})

	t.Run("RefusalKeepsTheEarlierResult", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		h.Mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
			if err := worker.SetResult(ctx, "small"); err != nil {
				return err
			}
			if err := worker.SetResult(ctx, func() {}); err == nil {
				return errors.New("a func marshalled")
			}
			return nil
		})
		if r := h.Deliver("job", "k", nil); r.Outcome != worker.OutcomeCompleted || string(r.Run.Result) != `"small"` {
			t.Fatalf("run = %s with result %s; want completed with the first result", r.Outcome, r.Run.Result)
		}
	})

	t.Run("FailedOrReleasedRunsStoreNone", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		h.Mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
			_ = worker.SetResult(ctx, "partial")
			if j.Attempt == 1 {
				return errors.New("downstream 503")
			}
			return worker.Permanent(errors.New("bad invoice"))
		})
		if r := h.Deliver("job", "k", nil); r.Outcome != worker.OutcomeReleased || r.Run.Result != nil {
			t.Fatalf("first = %s with result %q; want released, no result", r.Outcome, r.Run.Result)
		}
		r := h.Deliver("job", "k", nil)
		if r.Outcome != worker.OutcomeFailed || r.Run.Result != nil || r.Run.LastError != "bad invoice" {
			t.Fatalf("second = %s with result %q, error %q; want failed, no result, the final error", r.Outcome, r.Run.Result, r.Run.LastError)
		}
	})

	t.Run("OutsideAJob", func(t *testing.T) {
		t.Parallel()
		if err := worker.SetResult(t.Context(), 1); !errors.Is(err, worker.ErrNotInJob) {
			t.Fatalf("SetResult outside a job = %v; want ErrNotInJob", err)
		}
	})
}

func TestHTTPTargetResult(t *testing.T) {
	t.Parallel()
	bodies := map[string]struct {
		code int
		body string
	}{
		"json": {200, `{"invoice": "inv-7"}`}, "text": {201, "ok\n"}, "long": {200, strings.Repeat("é", worker.MaxResultBody)},
		"escaped": {200, strings.Repeat("\x01", worker.MaxResultBody)}, "optout": {200, `{"secret": 1}`}, "bad": {400, `{"error": "no"}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bodies[r.Header.Get("X-Runonce-Job")]
		w.WriteHeader(b.code)
		io.WriteString(w, b.body)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	h := workertest.New(t, nil)
	js := map[string]*jobs.Job{}
	for name := range bodies {
		js[name] = &jobs.Job{Name: name, URL: u, Result: name != "optout"}
	}
	worker.MuxFromJobs(h.Mux, js, nil)

	for name, want := range map[string]string{
		"json":   `{"status":200,"body":{"invoice":"inv-7"}}`,
		"text":   `{"status":201,"body":"ok\n"}`,
		"optout": ``,
		"bad":    ``,
	} {
		r := h.Deliver(name, "k", nil)
		if string(r.Run.Result) != want {
			t.Errorf("job %s: run %s with result %s; want %q", name, r.Run.Status, r.Run.Result, want)
		}
	}
	for _, name := range []string{"long", "escaped"} {
		r := h.Deliver(name, "k", nil)
		var got worker.HTTPResult
		if err := json.Unmarshal(r.Run.Result, &got); err != nil || r.Outcome != worker.OutcomeCompleted {
			t.Fatalf("job %s: %s with result %q (%v); want completed with a JSON result", name, r.Outcome, r.Run.Result, err)
		}
		var body string
		if err := json.Unmarshal(got.Body, &body); err != nil || !got.Truncated || len(r.Run.Result) > worker.MaxResult || !strings.HasPrefix(bodies[name].body, body) {
			t.Errorf("job %s: result of %d bytes, truncated %v, body a prefix of the answer: %v (%v); want a truncated prefix within MaxResult",
				name, len(r.Run.Result), got.Truncated, strings.HasPrefix(bodies[name].body, body), err)
		}
	}
}

// resultRefusing is a ledger whose records cannot hold a result (a Firestore document
// whose payload leaves no room).
type resultRefusing struct{ ledger.Driver }

func (l resultRefusing) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	if p.Result != nil {
		return nil, fmt.Errorf("%w: the document would be over 1 MiB", ledger.ErrTooLarge)
	}
	return l.Driver.Complete(ctx, p)
}

func TestResultTheLedgerCannotHoldCompletesWithout(t *testing.T) {
	t.Parallel()
	b := setup(t, resultRefusing{memory.New(nil)}, nil)
	var calls atomic.Int32
	b.mux.HandleFunc("job", func(ctx context.Context, j *worker.Job) error {
		calls.Add(1)
		return worker.SetResult(ctx, "fits the limit, not the record")
	})
	m := message("job", "k", "")
	if v := b.process(m); v.Outcome != worker.OutcomeCompleted || !v.Ack {
		t.Fatalf("verdict %+v; want completed and acked", v)
	}
	if r := b.run(m.Identity.RunID); r.Status != ledger.StatusCompleted || r.Result != nil || calls.Load() != 1 {
		t.Fatalf("run %s with result %q after %d calls; want completed once, without a result", r.Status, r.Result, calls.Load())
	}
}
