package receiver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/memory"
)

// bundle is a handler behind a receiver over a memory store, served over HTTP.
type bundle struct {
	url   string
	store receiver.Store
	runs  atomic.Int32 // executions of the handler
}

func setup(t *testing.T, o *receiver.Options, h http.HandlerFunc) *bundle {
	t.Helper()
	b := &bundle{store: memory.New(nil)}
	return b.serve(t, b.store, o, h)
}

func (b *bundle) serve(t *testing.T, s receiver.Store, o *receiver.Options, h http.HandlerFunc) *bundle {
	t.Helper()
	rc, err := receiver.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.runs.Add(1)
		h(w, r)
	})))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (%d %s)", ct, a.status, a.body)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(a.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", a.body, err)
	}
	if p["status"] != float64(a.status) || p["title"] == "" {
		t.Fatalf("problem %v does not carry the status %d and a title", p, a.status)
	}
	if link := a.header.Get("Link"); !strings.Contains(link, p["type"].(string)) || !strings.Contains(link, `rel="describedby"`) {
		t.Fatalf("Link %q does not describe the problem type %v", link, p["type"])
	}
	return p
}

func do(t *testing.T, method, url, body string, header ...string) answer {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func created(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Request-Time", time.Now().String())
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"echo":%q}`, body)
}

func TestReplayCarriesTheStoredStatusHeadersAndBody(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, created)
	first := do(t, "POST", b.url+"/charges", `{"amount":1}`, "Idempotency-Key", "k1")
	if first.status != http.StatusCreated || first.header.Get(receiver.HeaderReplayed) != "" {
		t.Fatalf("first = %d %v", first.status, first.header)
	}
	again := do(t, "POST", b.url+"/charges", `{"amount":1}`, "Idempotency-Key", "k1")
	if again.status != http.StatusCreated || again.body != first.body || again.header.Get("Content-Type") != "application/json" ||
		again.header.Get(receiver.HeaderReplayed) != "true" {
		t.Fatalf("replay = %d %v %q, want the first's status, Content-Type and body, marked replayed", again.status, again.header, again.body)
	}
	if again.header.Get("Set-Cookie") != "" || again.header.Get("X-Request-Time") != "" {
		t.Fatalf("the replay carries headers that are not stored: %v", again.header)
	}
	if b.runs.Load() != 1 {
		t.Fatalf("%d executions", b.runs.Load())
	}
	// The draft's form of the key, a Structured Field String, names the same key.
	if a := do(t, "POST", b.url+"/charges", `{"amount":1}`, "Idempotency-Key", `"k1"`); a.header.Get(receiver.HeaderReplayed) != "true" {
		t.Fatalf(`Idempotency-Key: "k1" = %d, want the replay of k1`, a.status)
	}
}

func TestMissingKeyIs400UnlessOptional(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, created)
	a := do(t, "POST", b.url+"/charges", `{}`)
	if p := a.problem(t); a.status != http.StatusBadRequest || !strings.HasSuffix(p["type"].(string), "#missing-key") {
		t.Fatalf("no key = %d %v", a.status, p)
	}
	if b.runs.Load() != 0 {
		t.Fatal("the handler ran for a request without a key")
	}
	// Other methods are not the receiver's.
	if a := do(t, "GET", b.url+"/charges", ""); a.status != http.StatusCreated {
		t.Fatalf("GET = %d, want the handler's answer", a.status)
	}
	opt := setup(t, &receiver.Options{KeyOptional: true}, created)
	for range 2 {
		if a := do(t, "POST", opt.url+"/charges", `{}`); a.status != http.StatusCreated || a.header.Get(receiver.HeaderReplayed) != "" {
			t.Fatalf("no key, optional = %d", a.status)
		}
	}
	if opt.runs.Load() != 2 {
		t.Fatalf("%d executions of keyless requests, want 2", opt.runs.Load())
	}
}

func TestMalformedKeysAre400(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, created)
	for name, h := range map[string][]string{
		"two fields":      {"Idempotency-Key", "a", "Idempotency-Key", "b"},
		"empty":           {"Idempotency-Key", `""`},
		"too long":        {"Idempotency-Key", strings.Repeat("k", receiver.MaxKeyLength+1)},
		"unclosed string": {"Idempotency-Key", `"abc`},
		"bad escape":      {"Idempotency-Key", `"a\b"`},
		"after quote":     {"Idempotency-Key", `"a"b`},
	} {
		a := do(t, "POST", b.url+"/charges", `{}`, h...)
		if p := a.problem(t); a.status != http.StatusBadRequest || !strings.HasSuffix(p["type"].(string), "#malformed-key") {
			t.Errorf("%s: %d %v", name, a.status, p)
		}
	}
	if b.runs.Load() != 0 {
		t.Fatal("the handler ran for a malformed key")
	}
}

func TestOtherBodyOrQueryIs422(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, created)
	do(t, "POST", b.url+"/charges?currency=eur", `{"amount":1}`, "Idempotency-Key", "k")
	for name, url := range map[string]string{"body": b.url + "/charges?currency=eur", "query": b.url + "/charges?currency=usd"} {
		body := `{"amount":1}`
		if name == "body" {
			body = `{"amount":2}`
		}
		a := do(t, "POST", url, body, "Idempotency-Key", "k")
		if p := a.problem(t); a.status != http.StatusUnprocessableEntity || !strings.HasSuffix(p["type"].(string), "#key-reused") {
			t.Fatalf("same key, other %s = %d %v", name, a.status, p)
		}
	}
	if b.runs.Load() != 1 {
		t.Fatalf("%d executions", b.runs.Load())
	}
}

func TestKeysAreScopedByTenantMethodAndPath(t *testing.T) {
	t.Parallel()
	b := setup(t, &receiver.Options{
		Methods: []string{"POST", "PUT"},
		Tenant:  func(r *http.Request) string { return r.Header.Get("X-Caller") },
	}, created)
	for _, req := range [][]string{
		{"POST", "/a", "alice"}, {"POST", "/a", "bob"}, {"POST", "/b", "alice"}, {"PUT", "/a", "alice"},
	} {
		if a := do(t, req[0], b.url+req[1], "{}", "Idempotency-Key", "same", "X-Caller", req[2]); a.header.Get(receiver.HeaderReplayed) != "" {
			t.Fatalf("%v was replayed from another scope", req)
		}
	}
	if a := do(t, "POST", b.url+"/a", "{}", "Idempotency-Key", "same", "X-Caller", "alice"); a.header.Get(receiver.HeaderReplayed) != "true" {
		t.Fatal("the same scope was not replayed")
	}
	if b.runs.Load() != 4 {
		t.Fatalf("%d executions, want 4", b.runs.Load())
	}
}

func TestRunHeadersCountOnlyWhenTrusted(t *testing.T) {
	t.Parallel()
	run := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	untrusted := setup(t, nil, created)
	do(t, "POST", untrusted.url+"/x", "{}", "Idempotency-Key", "a", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "5")
	if a := do(t, "POST", untrusted.url+"/x", "{}", "Idempotency-Key", "b", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "1"); a.status != http.StatusCreated {
		t.Fatalf("an older attempt without TrustRunHeaders = %d, want executed (the headers are ignored)", a.status)
	}

	trusted := setup(t, &receiver.Options{TrustRunHeaders: func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer worker" }}, created)
	do(t, "POST", trusted.url+"/x", "{}", "Idempotency-Key", "a", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "5", "Authorization", "Bearer worker")
	a := do(t, "POST", trusted.url+"/x", "{}", "Idempotency-Key", "b", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "1", "Authorization", "Bearer worker")
	if p := a.problem(t); a.status != http.StatusConflict || p["newer_attempt"] != float64(5) || !strings.Contains(p["detail"].(string), "attempt 5") {
		t.Fatalf("an older trusted attempt = %d %v, want 409 naming attempt 5", a.status, p)
	}
	if a := do(t, "POST", trusted.url+"/x", "{}", "Idempotency-Key", "c", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "1"); a.status != http.StatusCreated {
		t.Fatalf("an older attempt that failed the trust check = %d, want executed", a.status)
	}
	for name, h := range map[string][]string{
		"attempt without run": {"X-Runonce-Attempt", "1"},
		"run without attempt": {"X-Runonce-Run-Id", run},
		"attempt 0":           {"X-Runonce-Run-Id", run, "X-Runonce-Attempt", "0"},
		"attempt not number":  {"X-Runonce-Run-Id", run, "X-Runonce-Attempt", "two"},
	} {
		a := do(t, "POST", trusted.url+"/x", "{}", append(h, "Idempotency-Key", "d", "Authorization", "Bearer worker")...)
		if p := a.problem(t); a.status != http.StatusBadRequest || !strings.HasSuffix(p["type"].(string), "#malformed-run") {
			t.Errorf("%s: %d %v", name, a.status, p)
		}
	}
}

// With KeyOptional, a keyless request of a trusted run still passes the fence: a
// superseded attempt cannot act through it either.
func TestKeylessRequestsAreFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, &receiver.Options{KeyOptional: true, TrustRunHeaders: func(*http.Request) bool { return true }}, created)
	run := "run-1"
	if a := do(t, "POST", b.url+"/x", "{}", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "2"); a.status != http.StatusCreated {
		t.Fatalf("attempt 2 = %d", a.status)
	}
	if a := do(t, "POST", b.url+"/x", "{}", "X-Runonce-Run-Id", run, "X-Runonce-Attempt", "1"); a.status != http.StatusConflict {
		t.Fatalf("attempt 1 after 2, no key = %d, want 409", a.status)
	}
	if b.runs.Load() != 1 {
		t.Fatalf("%d executions", b.runs.Load())
	}
}

func TestWhatIsStored(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		stored bool
		opts   *receiver.Options
	}{
		{200, true, nil}, {302, true, nil}, {404, true, nil}, {409, true, nil},
		{401, false, nil}, {403, false, nil}, {408, false, nil}, {425, false, nil}, {429, false, nil},
		{500, false, nil}, {503, false, nil},
		{500, true, &receiver.Options{StoreStatus: func(int) bool { return true }}},
	} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, c.opts, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(c.status) })
			do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
			a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
			if got := a.header.Get(receiver.HeaderReplayed) == "true"; got != c.stored || a.status != c.status {
				t.Fatalf("status %d: second answer %d, replayed %v; want %d, replayed %v", c.status, a.status, got, c.status, c.stored)
			}
		})
	}
}

func TestLongResponsesAreReplayedWithoutTheirBody(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100)
	b := setup(t, &receiver.Options{MaxResponseBody: 64}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, long[:50])
		io.WriteString(w, long[50:])
	})
	if a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k"); a.body != long {
		t.Fatalf("the client got %d bytes, want the whole %d", len(a.body), len(long))
	}
	a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
	if a.status != http.StatusOK || a.body != "" || a.header.Get(receiver.HeaderBodyOmitted) != "true" || a.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("replay of a long response = %d %q %v, want 200, no body, %s", a.status, a.body, a.header, receiver.HeaderBodyOmitted)
	}
}

func TestBodyOverTheLimitIs413(t *testing.T) {
	t.Parallel()
	b := setup(t, &receiver.Options{MaxRequestBody: 10}, created)
	a := do(t, "POST", b.url+"/x", strings.Repeat("x", 11), "Idempotency-Key", "k")
	if p := a.problem(t); a.status != http.StatusRequestEntityTooLarge || !strings.HasSuffix(p["type"].(string), "#body-too-large") {
		t.Fatalf("a body over the limit = %d %v", a.status, p)
	}
	if a := do(t, "POST", b.url+"/x", strings.Repeat("x", 10), "Idempotency-Key", "k"); a.status != http.StatusCreated || a.body != `{"echo":"xxxxxxxxxx"}` {
		t.Fatalf("a body at the limit = %d %q, want it passed to the handler whole", a.status, a.body)
	}
}

// While a request holds its key, the others are told so with Retry-After, the lease's
// time left; the lease is renewed while the handler runs, however long it takes.
func TestInFlightIs409WithRetryAfterWhileTheLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, &receiver.Options{Lease: 3 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	first := make(chan answer, 1)
	go func() { first <- do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k") }()
	for deadline := time.Now().Add(10 * time.Second); b.runs.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the handler did not start")
		}
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) { // past the 3s lease
		a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
		p := a.problem(t)
		ra, _ := strconv.Atoi(a.header.Get("Retry-After"))
		if a.status != http.StatusConflict || !strings.HasSuffix(p["type"].(string), "#in-flight") || ra < 1 || ra > 3 {
			t.Fatalf("while in flight = %d %v, Retry-After %q; want 409 in-flight, 1-3s", a.status, p, a.header.Get("Retry-After"))
		}
	}
	close(release)
	if a := <-first; a.status != http.StatusCreated {
		t.Fatalf("the holder = %d", a.status)
	}
	if a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k"); a.header.Get(receiver.HeaderReplayed) != "true" || b.runs.Load() != 1 {
		t.Fatalf("after = %d, %d executions", a.status, b.runs.Load())
	}
}

// A handler past MaxHandlerTime has its context cancelled with ErrHandlerTimeout; its
// 5xx is not stored, and the next request executes.
func TestHandlerTimeoutCancelsAndReleases(t *testing.T) {
	t.Parallel()
	var cause atomic.Value
	b := setup(t, &receiver.Options{MaxHandlerTime: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cause.Store(context.Cause(r.Context()))
			http.Error(w, "timed out", http.StatusGatewayTimeout)
		case <-time.After(10 * time.Second):
		}
	})
	if a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k"); a.status != http.StatusGatewayTimeout {
		t.Fatalf("= %d", a.status)
	}
	if err, _ := cause.Load().(error); !errors.Is(err, receiver.ErrHandlerTimeout) {
		t.Fatalf("the handler's context was cancelled by %v, want ErrHandlerTimeout", err)
	}
	do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
	if b.runs.Load() != 2 {
		t.Fatalf("%d executions, want 2: a timed-out handler's 504 is not stored", b.runs.Load())
	}
}

// A client that gives up (its timeout, a dropped connection) does not cancel the
// handler: it runs to its end, and the client's retry gets its stored response.
func TestClientGoneDoesNotCancelTheHandler(t *testing.T) {
	t.Parallel()
	started, finished := make(chan struct{}), make(chan error, 1)
	b := setup(t, nil, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			finished <- context.Cause(r.Context())
			return
		case <-time.After(500 * time.Millisecond):
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
		finished <- nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", b.url+"/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	go func() {
		<-started
		cancel() // the client gives up mid-request
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the cancelled request got an answer")
	}
	if err := <-finished; err != nil {
		t.Fatalf("the handler's context was cancelled by %v when its client went away", err)
	}
	a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
	for deadline := time.Now().Add(5 * time.Second); a.status == http.StatusConflict && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		a = do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k") // stored once the handler returned
	}
	if a.status != http.StatusCreated || a.body != "charged" || a.header.Get(receiver.HeaderReplayed) != "true" {
		t.Fatalf("the client's retry = %d %q, want the stored 201 replayed", a.status, a.body)
	}
}

// failingStore refuses every call, as an unreachable store does.
type failingStore struct{ receiver.Store }

func (failingStore) Claim(context.Context, *receiver.ClaimParams) (*receiver.Claim, error) {
	return nil, errors.New("connection refused")
}

func TestUnreachableStoreIs503AndExecutesNothing(t *testing.T) {
	t.Parallel()
	b := &bundle{}
	b.serve(t, failingStore{memory.New(nil)}, nil, created)
	a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k")
	if p := a.problem(t); a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" || !strings.HasSuffix(p["type"].(string), "#store-unavailable") {
		t.Fatalf("= %d %v %v", a.status, a.header, p)
	}
	if b.runs.Load() != 0 {
		t.Fatal("the handler ran without a claim")
	}
}

func TestHandlerSeesTheRequestInfo(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	b := setup(t, &receiver.Options{TrustRunHeaders: func(*http.Request) bool { return true }}, func(w http.ResponseWriter, r *http.Request) {
		info, _ := receiver.FromContext(r.Context())
		got.Store(info)
	})
	do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "key-1", "X-Runonce-Run-Id", "run-1", "X-Runonce-Attempt", "3")
	if info, _ := got.Load().(receiver.Info); info != (receiver.Info{Key: "key-1", RunID: "run-1", Attempt: 3}) {
		t.Fatalf("FromContext = %+v", info)
	}
}

func TestFlushReachesTheClient(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
	})
	if a := do(t, "POST", b.url+"/x", "{}", "Idempotency-Key", "k"); a.body != "part" {
		t.Fatalf("= %q", a.body)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]*receiver.Options{
		"negative lease":         {Lease: -time.Second},
		"lease too short":        {Lease: time.Millisecond},
		"retention under lease":  {Lease: time.Hour, Retention: time.Minute},
		"response body too big":  {MaxResponseBody: receiver.MaxStoredBody + 1},
		"empty method":           {Methods: []string{""}},
		"negative request limit": {MaxRequestBody: -1},
	} {
		if _, err := receiver.New(memory.New(nil), o); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
	if _, err := receiver.New(nil, nil); err == nil {
		t.Error("a nil store was accepted")
	}
}
