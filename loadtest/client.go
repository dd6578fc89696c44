package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sethvargo/go-retry"
)

// runState is what the client learned about one run from the ingress's answers.
type runState struct {
	RunID      string
	Mismatch   bool      // two answers named different run IDs
	FirstSent  time.Time // intended time of its first delivery
	Accepted   time.Time // first 2xx
	NewAnswers int       // answers with duplicate false
	DupAnswers int       // answers with duplicate true
	Delivered  int       // deliveries that got a 2xx
	GaveUp     int       // deliveries that ran out of retries
}

// client is the scheduler: it posts deliveries to the ingress and retries them with
// exponential backoff on non-2xx answers, timeouts and lost answers.
type client struct {
	c       *config
	base    *url.URL
	job     string
	token   string
	http    *http.Client
	sem     chan struct{}
	budget  atomic.Int64 // requests left under -max-requests
	seed    uint64
	tlsConf *tls.Config

	mu       sync.Mutex
	states   []runState
	latency  *hdrhistogram.Histogram // per answered request, µs
	intended *hdrhistogram.Histogram // first attempt of each delivery, from its intended send time, µs
	kinds    map[string]int          // answers and errors by kind
	requests int
	retries  int
}

func newClient(c *config, target, token string) (*client, error) {
	u, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = c.MaxInflight
	tr.MaxIdleConnsPerHost = c.MaxInflight
	cl := &client{
		c: c, base: u, job: c.Job, token: token, seed: c.Seed,
		http:     &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		sem:      make(chan struct{}, c.MaxInflight),
		latency:  hdrhistogram.New(1, int64(5*time.Minute/time.Microsecond), 3),
		intended: hdrhistogram.New(1, int64(30*time.Minute/time.Microsecond), 3),
		kinds:    map[string]int{},
		tlsConf:  &tls.Config{ServerName: u.Hostname()},
	}
	cl.budget.Store(int64(c.MaxRequests))
	return cl, nil
}

// parseTarget reads the ingress's base URL.
func parseTarget(target string) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-target %q: want an absolute http(s) URL", target)
	}
	u.Path, u.RawQuery = "", ""
	return u, nil
}

func (cl *client) close() { cl.http.CloseIdleConnections() }

func (cl *client) acquire(ctx context.Context) bool {
	select {
	case cl.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (cl *client) release() { <-cl.sem }

// answer is the ingress's JSON answer to POST /v1/jobs/{job}.
type answer struct {
	RunID     string `json:"run_id"`
	Status    string `json:"status"`
	Duplicate bool   `json:"duplicate"`
	Error     string `json:"error"`
}

// outcome is one attempt's result.
type outcome struct {
	kind      string // e.g. "202 new", "200 duplicate", "lost answer (injected)", "503"
	status    int
	ans       answer
	latency   time.Duration
	answered  bool
	retryable bool
	err       error
}

var errBudget = errors.New("-max-requests reached")

// deliver runs one delivery's attempt sequence. The caller holds a slot for the first
// attempt; later attempts take one each, after their backoff.
func (cl *client) deliver(ctx context.Context, d delivery, intended time.Time) {
	rng := mrand.New(mrand.NewPCG(cl.seed, d.id))
	b := retry.NewExponential(cl.c.MinBackoff)
	b = retry.WithJitterPercent(20, b)
	b = retry.WithCappedDuration(cl.c.MaxBackoff, b)
	b = retry.WithMaxRetries(uint64(cl.c.Retries), b)
	attempt := 0
	cl.mu.Lock()
	if s := &cl.states[d.run.Index]; s.FirstSent.IsZero() || intended.Before(s.FirstSent) {
		s.FirstSent = intended
	}
	cl.mu.Unlock()
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		if attempt > 0 && !cl.acquire(ctx) {
			return ctx.Err()
		}
		defer cl.release()
		if cl.budget.Add(-1) < 0 {
			return errBudget
		}
		f := faultNone
		if attempt < cl.c.Retries { // never the last: every delivery can end with an answer
			f = drawFault(cl.c, rng)
		}
		out := cl.attempt(ctx, d, f, rng)
		cl.record(d, out, attempt, intended)
		attempt++
		switch {
		case out.answered && out.status/100 == 2:
			return nil
		case out.retryable:
			return retry.RetryableError(out.err)
		}
		return out.err
	})
	cl.mu.Lock()
	if err != nil {
		cl.states[d.run.Index].GaveUp++
		if errors.Is(err, errBudget) {
			cl.kinds["request budget exhausted"]++
		}
	} else {
		cl.states[d.run.Index].Delivered++
	}
	cl.mu.Unlock()
}

// request builds delivery d's request: the scheduler's headers (or an Idempotency-Key)
// spelled and written the way this delivery's caller does.
func (cl *client) request(ctx context.Context, d delivery) (*http.Request, error) {
	u := *cl.base
	u.Path = "/v1/jobs/" + cl.job
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(d.run.Payload))
	if err != nil {
		return nil, err
	}
	spell := headerCases[d.n%len(headerCases)]
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["User-Agent"] = []string{"runonce-loadtest"}
	if d.run.Key != "" {
		req.Header[spell("Idempotency-Key")] = []string{d.run.Key}
	} else {
		req.Header[spell("X-CloudScheduler-JobName")] = []string{d.run.SchedJob}
		req.Header[spell("X-CloudScheduler-ScheduleTime")] = []string{scheduleWritings[(d.run.Index+d.n)%len(scheduleWritings)](d.run.Tick)}
	}
	if cl.token != "" {
		req.Header["Authorization"] = []string{"Bearer " + cl.token}
	}
	return req, nil
}

func (cl *client) attempt(ctx context.Context, d delivery, f fault, rng *mrand.Rand) outcome {
	switch f {
	case faultLost:
		req, err := cl.request(ctx, d)
		if err != nil {
			return outcome{kind: "request error", err: err}
		}
		err = cl.sendAndDrop(ctx, req, rng)
		if err != nil {
			return outcome{kind: "lost answer: send failed", retryable: true, err: err}
		}
		return outcome{kind: "lost answer (injected)", retryable: true, err: errors.New("answer lost")}
	case faultShortTimeout:
		timeout := time.Duration(1 + rng.Int64N(int64(cl.c.ShortTimeout)))
		tctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out := cl.post(tctx, d)
		if !out.answered && tctx.Err() != nil && ctx.Err() == nil {
			out.kind = "client timeout (injected)"
		}
		return out
	}
	tctx, cancel := context.WithTimeout(ctx, cl.c.ClientTimeout)
	defer cancel()
	out := cl.post(tctx, d)
	if !out.answered && tctx.Err() != nil && ctx.Err() == nil {
		out.kind = "client timeout"
	}
	return out
}

func (cl *client) post(ctx context.Context, d delivery) outcome {
	req, err := cl.request(ctx, d)
	if err != nil {
		return outcome{kind: "request error", err: err}
	}
	t0 := time.Now()
	resp, err := cl.http.Do(req)
	if err != nil {
		return outcome{kind: "connection error", retryable: true, err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	lat := time.Since(t0)
	if err != nil {
		return outcome{kind: "connection error", retryable: true, err: err}
	}
	out := outcome{status: resp.StatusCode, latency: lat, answered: true}
	if jerr := json.Unmarshal(body, &out.ans); jerr != nil && resp.StatusCode/100 == 2 {
		out.kind = "2xx not JSON"
		out.err = fmt.Errorf("%d answer is not JSON: %q", resp.StatusCode, body)
		return out
	}
	switch c := resp.StatusCode; {
	case c == http.StatusAccepted && !out.ans.Duplicate:
		out.kind = "202 new"
	case c/100 == 2 && out.ans.Duplicate:
		out.kind = strconv.Itoa(c) + " duplicate"
	case c/100 == 2:
		out.kind = strconv.Itoa(c) + " not a duplicate"
	default:
		out.kind = strconv.Itoa(c)
		out.err = fmt.Errorf("answered %d: %s", c, out.ans.Error)
		// Cloud Scheduler retries every failed attempt; these are worth it.
		out.retryable = c >= 500 || c == http.StatusTooManyRequests || c == http.StatusRequestTimeout
	}
	return out
}

// sendAndDrop sends the whole request on a connection of its own and closes it without
// reading the answer, at once or a little later: the ingress may or may not have
// answered, the scheduler never knows.
func (cl *client) sendAndDrop(ctx context.Context, req *http.Request, rng *mrand.Rand) error {
	dialer := net.Dialer{Timeout: 5 * time.Second}
	host := cl.base.Host
	if cl.base.Port() == "" {
		host = net.JoinHostPort(cl.base.Hostname(), map[string]string{"http": "80", "https": "443"}[cl.base.Scheme])
	}
	conn, err := dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return err
	}
	defer conn.Close()
	if cl.base.Scheme == "https" {
		tc := tls.Client(conn, cl.tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		conn = tc
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req.Header["Connection"] = []string{"close"}
	if err := req.Write(conn); err != nil {
		return err
	}
	if rng.IntN(2) == 1 {
		time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
	}
	return nil
}

func (cl *client) record(d delivery, out outcome, attempt int, intended time.Time) {
	now := time.Now()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.requests++
	if attempt > 0 {
		cl.retries++
	}
	cl.kinds[out.kind]++
	if !out.answered {
		return
	}
	cl.latency.RecordValue(max(out.latency.Microseconds(), 1))
	if attempt == 0 {
		cl.intended.RecordValue(max(now.Sub(intended).Microseconds(), 1))
	}
	if out.status/100 != 2 {
		return
	}
	s := &cl.states[d.run.Index]
	switch {
	case s.RunID == "":
		s.RunID = out.ans.RunID
	case s.RunID != out.ans.RunID:
		s.Mismatch = true
	}
	if s.Accepted.IsZero() {
		s.Accepted = now
	}
	if out.ans.Duplicate {
		s.DupAnswers++
	} else {
		s.NewAnswers++
	}
}

// getRun reads GET /v1/runs/{id}.
func (cl *client) getRun(ctx context.Context, id string) (*runRecord, error) {
	u := *cl.base
	u.Path = "/v1/runs/" + id
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("GET /v1/runs/%s: %d", id, resp.StatusCode)
	}
	var r runRecord
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// bearerToken is -token, or the output of -token-cmd (e.g. "gcloud auth
// print-identity-token"), or empty.
func bearerToken(ctx context.Context, c *config) (string, error) {
	if c.TokenCmd == "" {
		return c.Token, nil
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", c.TokenCmd)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("-token-cmd %q: %w", c.TokenCmd, err)
	}
	tok := strings.TrimSpace(string(out))
	if tok == "" {
		return "", fmt.Errorf("-token-cmd %q printed no token", c.TokenCmd)
	}
	return tok, nil
}
