// Package client calls the runonce ingress's operators' API: list runs, show one, and
// retry, cancel or release it, or resolve an effect it left uncertain; audit a job's
// ticks, backfill the missing ones, and start a run by hand (docs/operating.md,
// docs/cloud-scheduler.md).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/ledger"
)

// TokenSource returns the bearer token of a request; nil sends none.
type TokenSource func(ctx context.Context) (string, error)

// Client calls one ingress.
type Client struct {
	// BaseURL is the ingress's URL, e.g. https://runonce-ingress-….run.app. Required.
	BaseURL string
	// HTTP defaults to http.DefaultClient.
	HTTP *http.Client
	// Token, when set, authenticates each request (a Google ID token for -auth oidc).
	Token TokenSource
}

// Error is an answer other than 2xx: its status and the ingress's error message.
type Error struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Message)
}

// ErrStatus is wrapped by errors of answers whose status is not 2xx; errors.As gives
// the *Error.
var ErrStatus = errors.New("client: the ingress refused the request")

// Unwrap makes errors.Is(err, ErrStatus) true.
func (e *Error) Unwrap() error { return ErrStatus }

// ListOptions filter and page GET /v1/runs. Zero fields filter nothing; filter by
// creation (Since, CreatedAfter, CreatedBefore) or by update (UpdatedAfter,
// UpdatedBefore), not both. The ingress checks them and answers 400 naming the
// problem.
type ListOptions struct {
	// Status lists the runs in this status only.
	Status ledger.Status
	// Job and Namespace list the runs of this job, of this namespace.
	Job, Namespace string
	// Since lists the runs created within it (before now, by the ingress's clock).
	Since time.Duration
	// CreatedAfter, CreatedBefore, UpdatedAfter and UpdatedBefore bound the runs'
	// creation or last update.
	CreatedAfter, CreatedBefore, UpdatedAfter, UpdatedBefore time.Time
	// PageSize is the most runs a page holds: 1 to ledger.MaxPageSize; zero, the
	// ingress's default (50).
	PageSize int
	// PageToken continues a listing: the previous page's NextPageToken.
	PageToken string
}

// Values returns o as GET /v1/runs's query parameters.
func (o *ListOptions) Values() url.Values {
	q := url.Values{}
	if o == nil {
		return q
	}
	for k, v := range map[string]string{"status": string(o.Status), "job": o.Job, "namespace": o.Namespace, "page_token": o.PageToken} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Since != 0 {
		q.Set("since", o.Since.String())
	}
	for k, t := range map[string]time.Time{"created_after": o.CreatedAfter, "created_before": o.CreatedBefore, "updated_after": o.UpdatedAfter, "updated_before": o.UpdatedBefore} {
		if !t.IsZero() {
			q.Set(k, t.Format(time.RFC3339Nano))
		}
	}
	if o.PageSize != 0 {
		q.Set("page_size", strconv.Itoa(o.PageSize))
	}
	return q
}

// List returns a page of runs, newest first; o nil lists the first page of all.
func (c *Client) List(ctx context.Context, o *ListOptions) (*api.ListJSON, error) {
	var out api.ListJSON
	path := "/v1/runs"
	if q := o.Values(); len(q) > 0 {
		path += "?" + q.Encode()
	}
	return &out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// Get returns one run with its history and effects; full asks for its payload too
// (operators only).
func (c *Client) Get(ctx context.Context, runID string, full bool) (*api.RunDetailJSON, error) {
	var out api.RunDetailJSON
	path := "/v1/runs/" + url.PathEscape(runID)
	if full {
		path += "?view=full"
	}
	return &out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// Act retries, cancels or releases a run (api.ActionRetry, …).
func (c *Client) Act(ctx context.Context, runID string, action api.Action, req *api.ActionRequest) (*api.ActionJSON, error) {
	if !action.Valid() {
		return nil, fmt.Errorf("client: no such action %q: api.ActionRetry, api.ActionCancel or api.ActionRelease; run %s is unchanged", action, runID)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out api.ActionJSON
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+":"+string(action), body, &out)
}

// Resolve settles an effect a failed run left uncertain (POST :resolve): it happened
// (api.OutcomeDone, with the ref of what it made) or it did not
// (api.OutcomeNotDone); the run is queued again and republished.
func (c *Client) Resolve(ctx context.Context, runID string, req *api.ResolveRequest) (*api.ActionJSON, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out api.ActionJSON
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+":"+string(api.ActionResolve), body, &out)
}

// Ticks returns a page of a job's tick audit; q holds GET /v1/jobs/{job}/ticks's query
// parameters (from, to, namespace, page_size, page_token).
func (c *Client) Ticks(ctx context.Context, job string, q url.Values) (*api.TicksJSON, error) {
	var out api.TicksJSON
	path := "/v1/jobs/" + url.PathEscape(job) + "/ticks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return &out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// RunJob starts a run of a job by hand (POST /v1/jobs/{job}:run); the answer's Key is the
// run's key, the one given or the one made for it.
func (c *Client) RunJob(ctx context.Context, job string, req *api.RunRequest) (*api.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out api.Response
	return &out, c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(job)+":"+api.JobActionRun, body, &out)
}

// Backfill claims (or, with DryRun, lists) the missing ticks of one page of a window
// (POST /v1/jobs/{job}:backfill); the answer's NextPageToken continues it.
func (c *Client) Backfill(ctx context.Context, job string, req *api.BackfillRequest) (*api.BackfillJSON, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out api.BackfillJSON
	return &out, c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(job)+":"+api.JobActionBackfill, body, &out)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	if c.BaseURL == "" {
		return errors.New("client: no ingress URL (--url or RUNONCE_URL)")
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != nil {
		tok, err := c.Token(ctx)
		if err != nil {
			return fmt.Errorf("client: a token for %s: %w", c.BaseURL, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &Error{Method: method, Path: path, Status: resp.StatusCode, Message: msg}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("client: %s %s: the answer is not the expected JSON: %w", method, path, err)
	}
	return nil
}
