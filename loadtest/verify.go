package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/ledger"
)

// runRecord is the ingress's answer to GET /v1/runs/{run_id}.
type runRecord = api.RunJSON

// verification is what was found after the load.
type verification struct {
	records    map[int]*runRecord // last record seen, by run index
	lastDone   time.Time          // when the last run was seen terminal
	pollErrors int
	sinkRuns   map[int]sinkRun
	sinkCalls  int
	foreign    int
	cutShort   int
	problems   []problem
}

// problem is one thing that is off, with the run it concerns (-1: none).
type problem struct {
	Kind   string `json:"kind"`
	Run    int    `json:"run"`
	RunID  string `json:"run_id,omitempty"`
	Detail string `json:"detail"`
}

// verify polls GET /v1/runs/{id} until every accepted run is terminal or
// -verify-timeout passes, lets stray effect calls settle, and checks every run.
func verify(ctx context.Context, c *config, cl *client, runs []*runSpec, snk *sink, stderr io.Writer) *verification {
	v := &verification{records: map[int]*runRecord{}}
	cl.mu.Lock()
	states := append([]runState{}, cl.states...)
	cl.mu.Unlock()
	var pending []int
	for i, s := range states {
		if s.RunID != "" {
			pending = append(pending, i)
		}
	}
	bar := newProgress(c, stderr, len(pending), "runs terminal", false)
	deadline := time.Now().Add(c.VerifyTimeout)
	var mu sync.Mutex
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		var still []int
		work := make(chan int)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := range work {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					rec, err := cl.getRun(rctx, states[i].RunID)
					cancel()
					mu.Lock()
					switch {
					case err != nil:
						v.pollErrors++
						still = append(still, i)
					default:
						v.records[i] = rec
						if rec.Status.Terminal() {
							v.lastDone = time.Now()
							bar.Add(1)
						} else {
							still = append(still, i)
						}
					}
					mu.Unlock()
				}
			})
		}
		for _, i := range pending {
			work <- i
		}
		close(work)
		wg.Wait()
		pending = still
		if len(pending) > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	bar.Finish()
	if len(pending) == 0 && c.Settle > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(c.Settle):
		}
	}
	v.sinkRuns, v.sinkCalls, v.foreign, v.cutShort = snk.snapshot()
	v.check(c, runs, states)
	return v
}

// check applies the verdicts: every accepted run terminal with the status it was meant
// to reach, exactly one applied effect per completed run (none per failed one), one
// Idempotency-Key per run, the run IDs the ingress named, nothing lost.
func (v *verification) check(c *config, runs []*runSpec, states []runState) {
	add := func(kind string, i int, id, format string, args ...any) {
		v.problems = append(v.problems, problem{Kind: kind, Run: i, RunID: id, Detail: fmt.Sprintf(format, args...)})
	}
	for i, r := range runs {
		s := states[i]
		sr, called := v.sinkRuns[i]
		if s.Mismatch {
			add("run_id mismatch", i, s.RunID, "deliveries of one run were answered with different run IDs")
		}
		if s.RunID == "" {
			add("not accepted", i, "", "no delivery got a 2xx within its retries (%d gave up)", s.GaveUp)
			if called && sr.Applied > 0 {
				add("effect of an unaccepted run", i, "", "the sink applied %d effect(s) for a run no answer accepted", sr.Applied)
			}
			continue
		}
		rec := v.records[i]
		switch {
		case rec == nil:
			add("lost", i, s.RunID, "accepted, but GET /v1/runs never answered")
			continue
		case !rec.Status.Terminal():
			add("lost", i, s.RunID, "accepted, still %s after -verify-timeout %s (attempts %d, last error %q)", rec.Status, c.VerifyTimeout, rec.AttemptsMade, rec.LastError)
			continue
		}
		if called {
			if len(sr.RunIDs) != 1 {
				add("run_id mismatch", i, s.RunID, "the worker called the sink with %d run IDs", len(sr.RunIDs))
			} else if _, ok := sr.RunIDs[s.RunID]; !ok {
				add("run_id mismatch", i, s.RunID, "the worker called the sink for another run ID than the ingress named")
			}
			if len(sr.Keys) != 1 {
				add("keys per run", i, s.RunID, "%d distinct Idempotency-Keys, want 1", len(sr.Keys))
			}
		}
		if r.Fail {
			if rec.Status != ledger.StatusFailed {
				add("wrong status", i, s.RunID, "meant to fail (the sink answers 400), but %s", rec.Status)
			}
			if sr.Applied != 0 {
				add("double effect", i, s.RunID, "meant to fail, but %d effect(s) applied", sr.Applied)
			}
			continue
		}
		if rec.Status != ledger.StatusCompleted {
			add("wrong status", i, s.RunID, "%s, want completed (attempts %d, last error %q)", rec.Status, rec.AttemptsMade, rec.LastError)
		}
		switch {
		case sr.Applied == 0 && rec.Status == ledger.StatusCompleted:
			add("missing effect", i, s.RunID, "completed without a successful call to the sink")
		case sr.Applied > 1:
			add("double effect", i, s.RunID, "%d effects applied", sr.Applied)
		}
		if c.Strict && sr.Replays > 0 {
			add("replayed call", i, s.RunID, "%d successful call(s) repeated an applied Idempotency-Key (-strict)", sr.Replays)
		}
	}
	sort.SliceStable(v.problems, func(a, b int) bool { return v.problems[a].Kind < v.problems[b].Kind })
}
