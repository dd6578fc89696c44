package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// payload is the body of every run the load test submits. It is the same for every
// delivery of a run (the ingress answers 422 to the same key with another payload), and
// the worker passes it unchanged to the sink, which learns from it which run a call is
// for and how to answer.
type payload struct {
	LoadTest string `json:"lt"`              // this invocation's nonce
	Run      int    `json:"run"`             // the run's index
	Fail     bool   `json:"fail,omitempty"`  // the sink answers 400: the run must end failed
	Flaky    bool   `json:"flaky,omitempty"` // the sink answers 503 to the first call of each key
	Slow     bool   `json:"slow,omitempty"`  // the sink waits -sink-delay before answering
}

// sinkRun is what the sink saw of one run (by the payload's index).
type sinkRun struct {
	Calls        int                 // every call
	Successes    int                 // calls answered 2xx
	Applied      int                 // effects applied: first 2xx per Idempotency-Key
	Replays      int                 // 2xx to a key whose effect was already applied (deduplicated downstream)
	Keys         map[string]struct{} // distinct Idempotency-Key values
	RunIDs       map[string]struct{} // distinct X-Runonce-Run-Id values
	FirstApplied time.Time
	LastCall     time.Time
}

type sinkKey struct {
	calls   int
	applied bool
}

// sink is the effect sink: the downstream of the load test's HTTP-target job. It is an
// idempotent downstream, as the worker expects: it applies the effect of the first
// successful call of each Idempotency-Key and answers later calls with the same key
// without applying it again, counting both.
type sink struct {
	nonce string
	delay time.Duration

	mu      sync.Mutex
	runs    map[int]*sinkRun
	keys    map[string]*sinkKey
	foreign int // calls whose payload is not this load test's
	// cutShort counts calls whose body could not be read: the caller went away mid-request
	// (a worker killed while it sent it). Such a call applies nothing and answers nobody.
	cutShort int
	calls    int
	srv      *http.Server
	ln       net.Listener
}

func newSink(nonce string, delay time.Duration) *sink {
	return &sink{nonce: nonce, delay: delay, runs: map[int]*sinkRun{}, keys: map[string]*sinkKey{}}
}

// start listens on addr (loopback by default) and serves until close.
func (s *sink) start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	s.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("POST /effect", s.effect)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return ln.Addr().String(), nil
}

func (s *sink) close() {
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
}

func (s *sink) effect(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		s.mu.Lock()
		s.cutShort++
		s.mu.Unlock()
		return
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil || p.LoadTest != s.nonce {
		s.mu.Lock()
		s.foreign++
		s.mu.Unlock()
		http.Error(w, "not this load test's run", http.StatusOK) // never make a stranger's run fail
		return
	}
	if p.Slow && s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
			return
		}
	}
	key, runID := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Runonce-Run-Id")
	now := time.Now()
	s.mu.Lock()
	s.calls++
	run := s.runs[p.Run]
	if run == nil {
		run = &sinkRun{Keys: map[string]struct{}{}, RunIDs: map[string]struct{}{}}
		s.runs[p.Run] = run
	}
	run.Calls++
	run.LastCall = now
	run.Keys[key] = struct{}{}
	run.RunIDs[runID] = struct{}{}
	k := s.keys[key]
	if k == nil {
		k = &sinkKey{}
		s.keys[key] = k
	}
	k.calls++
	status := http.StatusOK
	switch {
	case key == "":
		status = http.StatusBadRequest // the worker must always send one
	case p.Fail:
		status = http.StatusBadRequest
	case p.Flaky && k.calls == 1:
		status = http.StatusServiceUnavailable
	default:
		run.Successes++
		if k.applied {
			run.Replays++
		} else {
			k.applied = true
			run.Applied++
			if run.FirstApplied.IsZero() {
				run.FirstApplied = now
			}
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"status": status})
}

// snapshot copies what the sink saw so far.
func (s *sink) snapshot() (runs map[int]sinkRun, calls, foreign, cutShort int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs = make(map[int]sinkRun, len(s.runs))
	for i, r := range s.runs {
		c := *r
		c.Keys = make(map[string]struct{}, len(r.Keys))
		for k := range r.Keys {
			c.Keys[k] = struct{}{}
		}
		c.RunIDs = make(map[string]struct{}, len(r.RunIDs))
		for k := range r.RunIDs {
			c.RunIDs[k] = struct{}{}
		}
		runs[i] = c
	}
	return runs, s.calls, s.foreign, s.cutShort
}
