package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/jobs"
)

// TokenSource returns an ID token for an audience, for HTTP targets with auth: oidc;
// GoogleIDTokens is the one for Google Cloud.
type TokenSource func(ctx context.Context, audience string) (string, error)

// HTTPTargetOptions configure HTTPTarget.
type HTTPTargetOptions struct {
	// Client makes the calls. Defaults to a client without a timeout of its own (the
	// job's timeout bounds each call).
	Client *http.Client
	// Token is required for jobs with auth: oidc.
	Token TokenSource
	// DefaultTimeout bounds a call when the job sets no timeout. Defaults to 10m.
	DefaultTimeout time.Duration
}

// HTTPTarget returns a handler that calls the job's URL with the run's payload, under the
// effect RunEffect: the Idempotency-Key header carries its key, stable across every
// attempt of the run, and a call an earlier attempt completed is not made again. 2xx
// completes the run; 408, 425, 429, 5xx, a 409 with Retry-After and network errors
// release it (honouring Retry-After); other statuses fail it. A job with "result": true leaves the answer
// that completed the run as its result (HTTPResult). A call an earlier attempt made
// before it died leaves none: the answer is not asked for twice.
func HTTPTarget(j *jobs.Job, o *HTTPTargetOptions) Handler {
	if o == nil {
		o = &HTTPTargetOptions{}
	}
	client := o.Client
	if client == nil {
		client = &http.Client{}
	}
	timeout := cmp.Or(j.Timeout, o.DefaultTimeout, 10*time.Minute)
	method := cmp.Or(j.Method, http.MethodPost)
	return HandlerFunc(func(ctx context.Context, job *Job) error {
		return Effect(ctx, RunEffect, func(ctx context.Context, key string) error {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, j.URL.String(), bytes.NewReader(job.Payload))
			if err != nil {
				return Permanent(fmt.Errorf("job %s: build request: %w", j.Name, err))
			}
			for k, v := range j.Headers {
				req.Header.Set(k, v)
			}
			if req.Header.Get("Content-Type") == "" {
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("X-Runonce-Run-Id", job.RunID)
			req.Header.Set("X-Runonce-Job", job.Name)
			req.Header.Set("X-Runonce-Attempt", strconv.FormatInt(job.Attempt, 10))
			if !job.ScheduleTime.IsZero() {
				req.Header.Set("X-Runonce-Schedule-Time", job.ScheduleTime.UTC().Format(time.RFC3339))
			}
			if j.Auth == jobs.AuthOIDC {
				if o.Token == nil {
					return Permanent(fmt.Errorf("job %s: auth oidc but the worker has no ID token source", j.Name))
				}
				tok, err := o.Token(ctx, j.URL.String())
				if err != nil {
					return fmt.Errorf("job %s: ID token for %s: %w", j.Name, j.URL, err)
				}
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := client.Do(req)
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
					return fmt.Errorf("job %s: %s %s: no answer within %s: %w", j.Name, method, j.URL, timeout, err)
				}
				return fmt.Errorf("job %s: %s %s: %w", j.Name, method, j.URL, err)
			}
			defer resp.Body.Close()
			limit := int64(512)
			if j.Result {
				limit = MaxResultBody + 1
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			snippet := body[:min(len(body), 512)]
			if err := statusError(j, method, resp, snippet); err != nil || !j.Result {
				return err
			}
			return SetResult(ctx, targetResult(resp.StatusCode, body))
		})
	})
}

// MaxResultBody is the most of an HTTP target's answer kept in the run's result (a job
// with "result": true): 8 KiB, less where JSON escaping would take the result past
// MaxResult.
const MaxResultBody = 8 << 10

// HTTPResult is the result an HTTP target with "result": true leaves: the status of the
// call that completed the run and its body, as JSON when it is a JSON value, else as a
// string; Truncated when the body was longer than what is kept.
type HTTPResult struct {
	Status    int             `json:"status"`
	Body      json.RawMessage `json:"body,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// targetResult is the result of a target's answer: body (read up to MaxResultBody+1
// bytes) kept whole when it is a JSON value that fits, else as a string cut to fit.
func targetResult(status int, body []byte) HTTPResult {
	r := HTTPResult{Status: status}
	if len(body) == 0 {
		return r
	}
	if len(body) <= MaxResultBody && json.Valid(body) {
		r.Body = body
		return r
	}
	keep := min(len(body), MaxResultBody)
	r.Truncated = keep < len(body)
	for {
		s, _ := json.Marshal(strings.ToValidUTF8(string(body[:keep]), "\uFFFD"))
		if len(s) <= MaxResult-128 || keep == 0 { // room for the other fields
			r.Body = s
			return r
		}
		keep /= 2
		r.Truncated = true
	}
}

// statusError maps a target's answer to the run's fate.
func statusError(j *jobs.Job, method string, resp *http.Response, body []byte) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("job %s: %s %s answered %d: %q", j.Name, method, j.URL, code, bytes.TrimSpace(body))
	// A 409 with Retry-After is the Idempotency-Key draft's answer to a request whose key
	// another request still holds (an earlier attempt's call, still running downstream):
	// retry it later, when that call's answer can be replayed. A 409 without one is a
	// conflict to fail on (pkg/receiver's refusal of a superseded attempt has none).
	inFlight := code == http.StatusConflict && resp.Header.Get("Retry-After") != ""
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests, code >= 500, inFlight:
		if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			return RetryAfter(d, err)
		}
		return err
	default:
		return Permanent(err)
	}
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date. A delay too
// long for a time.Duration (over ~292 years) is the longest one; the worker cuts it to
// its MaxRetryAfter.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseUint(v, 10, 64); err == nil {
		if s > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// MuxFromJobs registers an HTTP target for each job of a jobs file on mux, with the
// job's max_attempts, skipping jobs mux already has a Go handler for and jobs without a
// target (a Go handler runs them).
func MuxFromJobs(mux *Mux, js map[string]*jobs.Job, o *HTTPTargetOptions) {
	have := map[string]bool{}
	for _, name := range mux.Jobs() {
		have[name] = true
	}
	for name, j := range js {
		if !have[name] && j.URL != nil {
			// The call is bounded by the job's timeout; the run time a little beyond it.
			mux.HandleWith(name, HTTPTarget(j, o), &HandleOptions{MaxAttempts: j.MaxAttempts, MaxRunTime: j.Timeout + time.Minute})
		}
	}
}
