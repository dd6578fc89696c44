package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/uuid"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/ticks"
)

// The OpenAPI document (pkg/ingress/openapi.yaml) is held to the code two ways:
// TestOpenAPIConformance drives every operation and every status it documents against
// the live handler (a real ledger, an in-process Pub/Sub) and validates each request and
// answer against it with kin-openapi, which validates OpenAPI 3.1 documents with JSON
// Schema 2020-12; TestOpenAPIRoutes checks that every route the handler serves is in the
// document and every operation of the document is served.

// loadOpenAPI loads and validates the embedded document and routes requests by it.
func loadOpenAPI(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(ingress.OpenAPI)
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.IsOpenAPI32OrLater() {
		t.Fatalf("openapi.yaml is OpenAPI %s; want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// operations lists the document's operations as "METHOD path" with their IDs.
func operations(doc *openapi3.T) map[string]*openapi3.Operation {
	out := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op
		}
	}
	return out
}

// apiCall is one request of the conformance test and what it must come to.
type apiCall struct {
	name   string
	b      *bundle
	method string
	path   string
	hdr    map[string]string
	body   string
	status int
	// invalid: the document refuses the request too (the code's 400 or 415 for a
	// problem a schema can express); otherwise it must accept it.
	invalid bool
}

// openAPIChecker sends calls, validates them against the document and remembers which
// operation answered which status.
type openAPIChecker struct {
	router routers.Router
	driven map[string]bool // operationId + " " + status
}

func (c *openAPIChecker) call(t *testing.T, a apiCall) []byte {
	t.Helper()
	req := func(base string) *http.Request {
		r, err := http.NewRequestWithContext(t.Context(), a.method, base+a.path, strings.NewReader(a.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range a.hdr {
			r.Header.Set(k, v)
		}
		return r
	}
	resp, err := a.b.srv.Client().Do(req(a.b.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	what := fmt.Sprintf("%s: %s %.100s", a.name, a.method, a.path)
	if resp.StatusCode != a.status {
		t.Errorf("%s = %d %.300s; want %d", what, resp.StatusCode, raw, a.status)
		return raw
	}
	// The request as the document sees it (the server's URL is the document's).
	vr := req("http://127.0.0.1:8080")
	route, params, err := c.router.FindRoute(vr)
	if err != nil {
		t.Errorf("%s: the document has no operation for it: %v", what, err)
		return raw
	}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	switch err := openapi3filter.ValidateRequest(t.Context(), in); {
	case a.invalid && err == nil:
		t.Errorf("%s: the document accepts the request that the code refuses with %d: describe the constraint", what, a.status)
	case !a.invalid && err != nil:
		t.Errorf("%s: the request does not conform to the document: %v", what, err)
	}
	in.Request = req("http://127.0.0.1:8080") // a fresh body
	rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(raw)), Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	if err := openapi3filter.ValidateResponse(t.Context(), rin); err != nil {
		t.Errorf("%s: the answer %d %.300s does not conform to the document: %v", what, resp.StatusCode, raw, err)
	}
	c.driven[route.Operation.OperationID+" "+strconv.Itoa(resp.StatusCode)] = true
	return raw
}

// The operators' methods unsupportedLedger does not have yet: a backend without the
// operators' API refuses them all.

func (u unsupportedLedger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	return u.no.ListRunIDs(ctx, p)
}

func (u unsupportedLedger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return u.no.Retry(ctx, p)
}

func (u unsupportedLedger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return u.no.OperatorRelease(ctx, p)
}

func (u unsupportedLedger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	return u.no.ResolveEffect(ctx, p)
}

// merged returns the union of header maps, later ones winning.
func merged(hs ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		for k, v := range h {
			out[k] = v
		}
	}
	return out
}

func TestOpenAPIConformance(t *testing.T) {
	t.Parallel()
	doc, router := loadOpenAPI(t)
	c := &openAPIChecker{router: router, driven: map[string]bool{}}
	ctx := t.Context()
	absent := strings.Repeat("0", 64)

	// ops: authentication off, everyone an operator, metrics exported, a small body limit.
	m, err := obs.NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	// Every handler has the same jobs file: "every" runs every ten minutes.
	js, err := jobs.Parse(strings.NewReader(`{"jobs": {"every": {"schedule": "*/10 * * * *", "missed_after": "2m"}, "plain": {}, "send-invoices": {}, "report": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	book, err := ticks.NewBook(ctx, js, &ticks.BookOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { book.Close() })
	jobsFile := func(c *ingress.Config) { c.Jobs, c.AcceptAnyJob, c.Schedules = jobs.Names(js), false, book }
	ops := setup(t, setupOpts{namespace: "openapi-" + uuid.NewString()[:8], cfg: func(c *ingress.Config) {
		jobsFile(c)
		c.Operators, c.Metrics, c.Meter, c.MaxBody = auth.None{}, m.Handler(), m.Meter("test"), 4096
	}})
	// secured: OIDC, a reader and an operator, and a jobs file.
	newOIDC, tok := idp(t)
	secured := setup(t, setupOpts{cfg: func(c *ingress.Config) {
		jobsFile(c)
		c.Auth, c.Operators = newOIDC("scheduler@example.com"), newOIDC("oncall@example.com")
	}})
	reader, stranger := tok("scheduler@example.com"), tok("stranger@example.com")
	// down: a ledger that no longer answers (closed).
	var closed *sqlite.Ledger
	down := setup(t, setupOpts{open: func(tb testing.TB) ledger.Driver {
		l, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "runonce.db"), nil)
		if err != nil {
			tb.Fatal(err)
		}
		closed = l
		return l
	}, cfg: func(c *ingress.Config) {
		jobsFile(c)
		c.Operators = auth.None{}
	}})
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	// unsupported: a backend without the operators' API.
	unsupported := setup(t, setupOpts{open: func(tb testing.TB) ledger.Driver {
		return unsupportedLedger{Driver: backends[0].open(tb, nil), no: driver.NoOperations{Backend: "test"}}
	}, cfg: func(c *ingress.Config) {
		jobsFile(c)
		c.Operators = auth.None{}
	}})

	octet := map[string]string{"Content-Type": "application/octet-stream"}
	key := func(k string) map[string]string {
		return map[string]string{"Idempotency-Key": k, "Content-Type": "application/json"}
	}
	crossOrigin := map[string]string{"Origin": "https://elsewhere.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
	runID := func(raw []byte) string {
		t.Helper()
		s := string(raw)
		i := strings.Index(s, `"run_id":"`)
		if i < 0 {
			t.Fatalf("no run_id in %s", raw)
		}
		return s[i+10 : i+10+64]
	}
	post := func(b *bundle, job string, hdr map[string]string) string {
		t.Helper()
		return runID(c.call(t, apiCall{name: "a new run", b: b, method: "POST", path: "/v1/jobs/" + job, hdr: merged(hdr, key(uuid.NewString())), body: `{"invoice":42}`, status: 202}))
	}

	// POST /v1/jobs/{job}
	k := uuid.NewString()
	c.call(t, apiCall{name: "a new run", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(k), body: `{"invoice":42}`, status: 202})
	c.call(t, apiCall{name: "a duplicate of a queued run", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(k), body: `{"invoice":42}`, status: 202})
	c.call(t, apiCall{name: "a scheduler's tick", b: ops, method: "POST", path: "/v1/jobs/report", hdr: merged(octet, schedHeaders("report-daily", tick())), body: "opaque", status: 202})
	c.call(t, apiCall{name: "a job_key in a JSON body", b: ops, method: "POST", path: "/v1/jobs/report", hdr: jsonBody, body: `{"job_key":"2026-10-16"}`, status: 202})
	k = uuid.NewString()
	done := runID(c.call(t, apiCall{name: "a run to complete", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(k), body: `{}`, status: 202}))
	if _, err := ops.led.Complete(ctx, &ledger.CompleteParams{Fence: ops.hold(t, done, "host-a/1"), Result: []byte(`{"invoice_id":"in_7"}`)}); err != nil {
		t.Fatal(err)
	}
	c.call(t, apiCall{name: "a duplicate of a completed run", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(k), body: `{}`, status: 200})
	c.call(t, apiCall{name: "a payload other than the run's", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(k), body: `{"other":1}`, status: 422})
	c.call(t, apiCall{name: "no key", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: octet, body: "x", status: 400})
	c.call(t, apiCall{name: "a bad job name", b: ops, method: "POST", path: "/v1/jobs/send$invoices", hdr: key("k"), body: "{}", status: 400, invalid: true})
	c.call(t, apiCall{name: "a body over the limit", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: merged(octet, map[string]string{"Idempotency-Key": "big"}), body: strings.Repeat("x", 4097), status: 413})
	c.call(t, apiCall{name: "a cross-origin post", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: merged(crossOrigin, key("k")), body: "{}", status: 403})
	c.call(t, apiCall{name: "no token", b: secured, method: "POST", path: "/v1/jobs/send-invoices", hdr: key("k"), body: "{}", status: 401})
	c.call(t, apiCall{name: "a caller not allowed", b: secured, method: "POST", path: "/v1/jobs/send-invoices", hdr: merged(stranger, key("k")), body: "{}", status: 403})
	c.call(t, apiCall{name: "an unknown job", b: secured, method: "POST", path: "/v1/jobs/send-invoice", hdr: merged(reader, key("k")), body: "{}", status: 404})
	invalid := ledger.ErrInvalid // a claim the ledger refuses: 500
	ops.led.failClaim.Store(&invalid)
	c.call(t, apiCall{name: "a claim the ledger refuses", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(uuid.NewString()), body: "{}", status: 500})
	ops.led.failClaim.Store(nil)
	ops.pub.fail.Store(true)
	c.call(t, apiCall{name: "Pub/Sub down", b: ops, method: "POST", path: "/v1/jobs/send-invoices", hdr: key(uuid.NewString()), body: "{}", status: 503})
	ops.pub.fail.Store(false)
	c.call(t, apiCall{name: "the ledger down", b: down, method: "POST", path: "/v1/jobs/send-invoices", hdr: key("k"), body: "{}", status: 503})

	// The job API.
	now := time.Now().UTC()
	window := func(from, to time.Duration) string {
		return "from=" + now.Add(from).Format(time.RFC3339) + "&to=" + now.Add(to).Format(time.RFC3339)
	}
	ticksOf := func(job string) string { return "/v1/jobs/" + job + "/ticks?" }
	c.call(t, apiCall{name: "the audit", b: ops, method: "GET", path: ticksOf("every") + window(-time.Hour, 0) + "&page_size=10", status: 200})
	c.call(t, apiCall{name: "the audit by default", b: ops, method: "GET", path: ticksOf("every"), status: 200})
	c.call(t, apiCall{name: "a page size of 0", b: ops, method: "GET", path: ticksOf("every") + "page_size=0", status: 400, invalid: true})
	c.call(t, apiCall{name: "an empty window", b: ops, method: "GET", path: ticksOf("every") + window(0, -time.Hour), status: 400})
	c.call(t, apiCall{name: "no token", b: secured, method: "GET", path: ticksOf("every"), status: 401})
	c.call(t, apiCall{name: "a reader", b: secured, method: "GET", path: ticksOf("every"), hdr: reader, status: 403})
	c.call(t, apiCall{name: "a job without a schedule", b: ops, method: "GET", path: ticksOf("plain"), status: 404})
	c.call(t, apiCall{name: "a backend without listing", b: unsupported, method: "GET", path: ticksOf("every"), status: 501})
	c.call(t, apiCall{name: "the ledger down", b: down, method: "GET", path: ticksOf("every"), status: 503})

	run := func(job string) string { return "/v1/jobs/" + job + ":run" }
	c.call(t, apiCall{name: "a run by hand", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody, body: `{"payload":"{\"invoice\":42}"}`, status: 202})
	c.call(t, apiCall{name: "a run by hand without a body", b: ops, method: "POST", path: run("report"), hdr: jsonBody, status: 202})
	c.call(t, apiCall{name: "a run by hand of a completed run's key", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody, body: `{"key":"` + k + `","payload":"{}"}`, status: 200})
	c.call(t, apiCall{name: "a run by hand with another payload", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody, body: `{"key":"` + k + `","payload":"other"}`, status: 422})
	c.call(t, apiCall{name: "a run by hand with an unknown field", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody, body: `{"colour":"red"}`, status: 400, invalid: true})
	c.call(t, apiCall{name: "a run by hand without a token", b: secured, method: "POST", path: run("send-invoices"), hdr: jsonBody, status: 401})
	c.call(t, apiCall{name: "a run by hand by a reader", b: secured, method: "POST", path: run("send-invoices"), hdr: reader, status: 403})
	c.call(t, apiCall{name: "a run by hand of an unknown job", b: ops, method: "POST", path: run("send-invoice"), hdr: jsonBody, status: 404})
	c.call(t, apiCall{name: "a run by hand with a payload over the limit", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody,
		body: `{"payload":"` + strings.Repeat("x", 5000) + `"}`, status: 413})
	c.call(t, apiCall{name: "a run by hand not declared JSON", b: ops, method: "POST", path: run("send-invoices"), hdr: octet, body: "{}", status: 415, invalid: true})
	ops.led.failClaim.Store(&invalid)
	c.call(t, apiCall{name: "a run by hand the ledger refuses", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody, status: 500})
	ops.led.failClaim.Store(nil)
	ops.pub.fail.Store(true)
	c.call(t, apiCall{name: "a run by hand with Pub/Sub down", b: ops, method: "POST", path: run("send-invoices"), hdr: jsonBody, status: 503})
	ops.pub.fail.Store(false)

	backfill := func(job string) string { return "/v1/jobs/" + job + ":backfill" }
	span := `"from":"` + now.Add(-time.Hour).Format(time.RFC3339) + `","to":"` + now.Add(-5*time.Minute).Format(time.RFC3339) + `"`
	c.call(t, apiCall{name: "a dry run", b: ops, method: "POST", path: backfill("every"), hdr: jsonBody, body: `{` + span + `,"dry_run":true}`, status: 200})
	c.call(t, apiCall{name: "a backfill", b: ops, method: "POST", path: backfill("every"), hdr: jsonBody, body: `{` + span + `}`, status: 200})
	c.call(t, apiCall{name: "a backfill without to", b: ops, method: "POST", path: backfill("every"), hdr: jsonBody, body: `{"from":"2026-05-04T00:00:00Z"}`, status: 400, invalid: true})
	c.call(t, apiCall{name: "a backfill without a token", b: secured, method: "POST", path: backfill("every"), hdr: jsonBody, body: `{` + span + `}`, status: 401})
	c.call(t, apiCall{name: "a backfill by a reader", b: secured, method: "POST", path: backfill("every"), hdr: reader, body: `{` + span + `}`, status: 403})
	c.call(t, apiCall{name: "a backfill of a job without a schedule", b: ops, method: "POST", path: backfill("plain"), hdr: jsonBody, body: `{` + span + `}`, status: 404})
	c.call(t, apiCall{name: "a backfill over the limit", b: ops, method: "POST", path: backfill("every"), hdr: jsonBody,
		body: `{` + span + `,"payload":"` + strings.Repeat("x", 13000) + `"}`, status: 413})
	c.call(t, apiCall{name: "a backfill not declared JSON", b: ops, method: "POST", path: backfill("every"), hdr: octet, body: `{` + span + `}`, status: 415, invalid: true})
	c.call(t, apiCall{name: "a backfill on a backend without listing", b: unsupported, method: "POST", path: backfill("every"), hdr: jsonBody, body: `{` + span + `}`, status: 501})
	c.call(t, apiCall{name: "a backfill with the ledger down", b: down, method: "POST", path: backfill("every"), hdr: jsonBody, body: `{` + span + `}`, status: 503})

	// GET /v1/runs
	failed := ops.failRun(t, "send-invoices", "the relay answered 502")
	c.call(t, apiCall{name: "the failed runs", b: ops, method: "GET", path: "/v1/runs?status=failed&job=send-invoices&since=24h&page_size=10", status: 200})
	c.call(t, apiCall{name: "a page", b: ops, method: "GET", path: "/v1/runs?page_size=1", status: 200})
	post(secured, "send-invoices", reader)
	c.call(t, apiCall{name: "a reader's list", b: secured, method: "GET", path: "/v1/runs", hdr: reader, status: 200})
	c.call(t, apiCall{name: "a page size over the limit", b: ops, method: "GET", path: "/v1/runs?page_size=1000", status: 400, invalid: true})
	c.call(t, apiCall{name: "a since that is no duration", b: ops, method: "GET", path: "/v1/runs?since=yesterday", status: 400})
	c.call(t, apiCall{name: "no token", b: secured, method: "GET", path: "/v1/runs", status: 401})
	c.call(t, apiCall{name: "a caller not allowed", b: secured, method: "GET", path: "/v1/runs", hdr: stranger, status: 403})
	c.call(t, apiCall{name: "a backend without listing", b: unsupported, method: "GET", path: "/v1/runs", status: 501})
	c.call(t, apiCall{name: "the ledger down", b: down, method: "GET", path: "/v1/runs", status: 503})

	// GET /v1/runs/{run_id}
	c.call(t, apiCall{name: "a failed run", b: ops, method: "GET", path: "/v1/runs/" + failed, status: 200})
	c.call(t, apiCall{name: "a completed run by a prefix", b: ops, method: "GET", path: "/v1/runs/" + done[:12], status: 200})
	c.call(t, apiCall{name: "the full view", b: ops, method: "GET", path: "/v1/runs/" + failed + "?view=full", status: 200})
	readable := post(secured, "send-invoices", reader)
	c.call(t, apiCall{name: "a reader's view", b: secured, method: "GET", path: "/v1/runs/" + readable, hdr: reader, status: 200})
	c.call(t, apiCall{name: "an unknown view", b: ops, method: "GET", path: "/v1/runs/" + failed + "?view=everything", status: 400, invalid: true})
	c.call(t, apiCall{name: "a prefix too short", b: ops, method: "GET", path: "/v1/runs/abc", status: 400, invalid: true})
	c.call(t, apiCall{name: "no token", b: secured, method: "GET", path: "/v1/runs/" + readable, status: 401})
	c.call(t, apiCall{name: "a reader asks for the payload", b: secured, method: "GET", path: "/v1/runs/" + readable + "?view=full", hdr: reader, status: 403})
	c.call(t, apiCall{name: "no such run", b: ops, method: "GET", path: "/v1/runs/" + absent, status: 404})
	p := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	for _, rid := range []string{p + "1" + strings.Repeat("0", 51), p + "2" + strings.Repeat("0", 51)} {
		if _, err := ops.led.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: rid, Job: "prefixed"}, AttemptID: uuid.NewString()}); err != nil {
			t.Fatal(err)
		}
	}
	c.call(t, apiCall{name: "a prefix of two runs", b: ops, method: "GET", path: "/v1/runs/" + p, status: 409})
	c.call(t, apiCall{name: "a prefix on a backend without look-ups", b: unsupported, method: "GET", path: "/v1/runs/" + absent[:12], status: 501})
	c.call(t, apiCall{name: "the ledger down", b: down, method: "GET", path: "/v1/runs/" + absent, status: 503})

	// The actions.
	reason := `{"reason":"the relay is back"}`
	for _, a := range []struct {
		action api.Action
		ok     func() string // a run the action applies to
		wrong  func() string // a run whose status refuses it
	}{
		{api.ActionRetry, func() string { return ops.failRun(t, "send-invoices", "boom") }, func() string { return post(ops, "send-invoices", nil) }},
		{api.ActionCancel, func() string { return post(ops, "send-invoices", nil) }, func() string { return ops.failRun(t, "send-invoices", "boom") }},
		{api.ActionRelease, func() string {
			id := post(ops, "send-invoices", nil)
			ops.hold(t, id, "host-a/1")
			return id
		}, func() string { return post(ops, "send-invoices", nil) }},
	} {
		name := string(a.action)
		path := func(id string) string { return "/v1/runs/" + id + ":" + name }
		c.call(t, apiCall{name: name, b: ops, method: "POST", path: path(a.ok()), hdr: jsonBody, body: reason, status: 200})
		c.call(t, apiCall{name: name + " of a run in another status", b: ops, method: "POST", path: path(a.wrong()), hdr: jsonBody, body: reason, status: 409})
		c.call(t, apiCall{name: name + " without a reason", b: ops, method: "POST", path: path(failed), hdr: jsonBody, body: `{}`, status: 400, invalid: true})
		c.call(t, apiCall{name: name + " of a prefix", b: ops, method: "POST", path: path(failed[:12]), hdr: jsonBody, body: reason, status: 400, invalid: true})
		c.call(t, apiCall{name: name + " without a token", b: secured, method: "POST", path: path(readable), hdr: jsonBody, body: reason, status: 401})
		c.call(t, apiCall{name: name + " by a reader", b: secured, method: "POST", path: path(readable), hdr: reader, body: reason, status: 403})
		c.call(t, apiCall{name: name + " from another origin", b: ops, method: "POST", path: path(failed), hdr: crossOrigin, body: reason, status: 403})
		c.call(t, apiCall{name: name + " of no run", b: ops, method: "POST", path: path(absent), hdr: jsonBody, body: reason, status: 404})
		c.call(t, apiCall{name: name + " with a body over 8 KiB", b: ops, method: "POST", path: path(failed), hdr: jsonBody,
			body: `{"reason":"x","note":"` + strings.Repeat("x", 9000) + `"}`, status: 413})
		c.call(t, apiCall{name: name + " with a body not declared JSON", b: ops, method: "POST", path: path(failed), hdr: map[string]string{"Content-Type": "text/plain"}, body: reason, status: 415, invalid: true})
		c.call(t, apiCall{name: name + " on a backend without it", b: unsupported, method: "POST", path: path(absent), hdr: jsonBody, body: reason, status: 501})
		c.call(t, apiCall{name: name + " with the ledger down", b: down, method: "POST", path: path(absent), hdr: jsonBody, body: reason, status: 503})
	}
	resolve := func(id string) string { return "/v1/runs/" + id + ":resolve" }
	notDone := `{"effect":"send-email","outcome":"not_done","reason":"nothing in the relay's log"}`
	c.call(t, apiCall{name: "resolve: it happened", b: ops, method: "POST", path: resolve(ops.failRun(t, "send-invoices", "lost")), hdr: jsonBody,
		body: `{"effect":"send-email","outcome":"done","ref":"msg-7","reason":"the relay's log shows it","attempt":1}`, status: 200})
	c.call(t, apiCall{name: "resolve: it did not", b: ops, method: "POST", path: resolve(failed), hdr: jsonBody, body: notDone, status: 200})
	c.call(t, apiCall{name: "resolve a run that is not failed", b: ops, method: "POST", path: resolve(failed), hdr: jsonBody, body: notDone, status: 409})
	other := ops.failRun(t, "send-invoices", "lost")
	for _, body := range []string{
		`{"effect":"send-email","outcome":"maybe","reason":"r"}`,
		`{"effect":"send-email","outcome":"done","reason":"r"}`,
		`{"effect":"send-email","outcome":"not_done","ref":"x","reason":"r"}`,
		`{"effect":"send-email","outcome":"not_done","reason":"r","colour":"red"}`,
		`{"outcome":"not_done","reason":"r"}`,
	} {
		c.call(t, apiCall{name: "resolve " + body, b: ops, method: "POST", path: resolve(other), hdr: jsonBody, body: body, status: 400, invalid: true})
	}
	c.call(t, apiCall{name: "resolve an effect the run does not have", b: ops, method: "POST", path: resolve(other), hdr: jsonBody,
		body: `{"effect":"charge","outcome":"not_done","reason":"r"}`, status: 404})
	c.call(t, apiCall{name: "resolve no run", b: ops, method: "POST", path: resolve(absent), hdr: jsonBody, body: notDone, status: 404})
	c.call(t, apiCall{name: "resolve without a token", b: secured, method: "POST", path: resolve(readable), hdr: jsonBody, body: notDone, status: 401})
	c.call(t, apiCall{name: "resolve by a reader", b: secured, method: "POST", path: resolve(readable), hdr: reader, body: notDone, status: 403})
	c.call(t, apiCall{name: "resolve with a body over 8 KiB", b: ops, method: "POST", path: resolve(other), hdr: jsonBody,
		body: `{"effect":"send-email","outcome":"not_done","reason":"` + strings.Repeat("x", 9000) + `"}`, status: 413, invalid: true})
	c.call(t, apiCall{name: "resolve with a body not declared JSON", b: ops, method: "POST", path: resolve(other), hdr: octet, body: notDone, status: 415, invalid: true})
	c.call(t, apiCall{name: "resolve on a backend without it", b: unsupported, method: "POST", path: resolve(absent), hdr: jsonBody, body: notDone, status: 501})
	c.call(t, apiCall{name: "resolve with the ledger down", b: down, method: "POST", path: resolve(absent), hdr: jsonBody, body: notDone, status: 503})

	// The service's endpoints.
	c.call(t, apiCall{name: "health", b: ops, method: "GET", path: "/healthz", status: 200})
	c.call(t, apiCall{name: "ready", b: ops, method: "GET", path: "/readyz", status: 200})
	c.call(t, apiCall{name: "not ready", b: down, method: "GET", path: "/readyz", status: 503})
	c.call(t, apiCall{name: "metrics", b: ops, method: "GET", path: "/metrics", status: 200})
	c.call(t, apiCall{name: "metrics not exported", b: secured, method: "GET", path: "/metrics", status: 404})
	served := c.call(t, apiCall{name: "the document", b: secured, method: "GET", path: ingress.OpenAPIPath, status: 200})
	if !bytes.Equal(served, ingress.OpenAPI) {
		t.Errorf("GET %s does not answer the embedded document", ingress.OpenAPIPath)
	}

	// Every status the document names was driven and validated.
	for name, op := range operations(doc) {
		for status := range op.Responses.Map() {
			if !c.driven[op.OperationID+" "+status] {
				t.Errorf("%s (%s) documents status %s, which no call of TestOpenAPIConformance drives: add one", name, op.OperationID, status)
			}
		}
	}
}

// TestOpenAPIRoutes checks that the document and the routes the handler serves are the
// same: every pattern the handler's mux registers (but the dashboard's and the catch-all)
// serves an operation of the document, every operation of the document is served by a
// pattern of its own, and the endpoints the catch-all's 404 lists to a client (which name
// the custom methods, POST /v1/runs/{run_id}:retry…, that one pattern serves) are the
// document's.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	m, err := obs.NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{cfg: func(c *ingress.Config) { c.Operators, c.Metrics = auth.None{}, m.Handler() }})
	const fix = "describe it in pkg/ingress/openapi.yaml, with its statuses, and drive them in TestOpenAPIConformance"

	sample := strings.NewReplacer("{job}", "send-invoices", "{run_id}", strings.Repeat("0", 64))
	ops := operations(doc)
	served := map[string]bool{} // patterns that serve an operation of the document
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		method, path, _ := strings.Cut(name, " ")
		r := httptest.NewRequest(method, sample.Replace(path), nil)
		p := b.h.Route(r)
		if p == "" || p == "/" || !strings.Contains(p, " ") {
			t.Errorf("the document's %s is served by no route of its own (pattern %q)", name, p)
			continue
		}
		served[p] = true
	}
	paths := map[string]bool{}
	for p := range served {
		_, path, _ := strings.Cut(p, " ")
		paths[path] = true
	}
	for _, p := range b.h.Patterns() {
		method, path, hasMethod := strings.Cut(p, " ")
		if !hasMethod {
			path = method
		}
		switch {
		case p == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/"):
			// The catch-all's 404 and the dashboard's HTML pages are not the API.
		case !hasMethod && !paths[path]:
			t.Errorf("route %s answers 405 for a path the document does not describe", p)
		case hasMethod && !served[p]:
			t.Errorf("route %s is registered but no operation of the document is served by it: %s", p, fix)
		}
	}

	// The catch-all's list of endpoints.
	resp := b.do(t, http.MethodGet, "/no/such/path", nil, "")
	msg, _ := resp.body["error"].(string)
	_, list, ok := strings.Cut(msg, "/no/such/path: ")
	if resp.status != http.StatusNotFound || !ok {
		t.Fatalf("GET /no/such/path = %d %q; want 404 listing the endpoints", resp.status, msg)
	}
	listed := map[string]bool{}
	for item := range strings.SplitSeq(list, ", ") {
		item, _, _ = strings.Cut(item, " (")
		method, path, ok := strings.Cut(item, " ")
		if !ok {
			method, path = http.MethodGet, item
		}
		if path == "/ui/" {
			continue
		}
		base, verbs, custom := strings.Cut(path, ":")
		if !custom {
			listed[method+" "+path] = true
			continue
		}
		for v := range strings.SplitSeq(verbs, "|") {
			listed[method+" "+base+":"+strings.TrimPrefix(v, ":")] = true
		}
	}
	for e := range listed {
		if ops[e] == nil {
			t.Errorf("the 404 of an unknown path lists %s, which the document does not describe: %s", e, fix)
		}
	}
	for name := range ops {
		if !listed[name] {
			t.Errorf("the document describes %s, which the 404 of an unknown path does not list: add it to the list in ingress.New", name)
		}
	}
}
