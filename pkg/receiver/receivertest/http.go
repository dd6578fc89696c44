package receivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/receiver"
)

var httpTests = map[string]func(*testing.T, Harness){
	"ConcurrentRequestsExecuteOnce":      testConcurrentRequestsExecuteOnce,
	"PanicLeavesTheKeyClaimable":         testPanicLeavesTheKeyClaimable,
	"LostLeaseIsNeverReplayedAsSuccess":  testLostLeaseIsNeverReplayedAsSuccess,
	"SupersededAttemptNeverExecutes":     testSupersededAttemptNeverExecutes,
	"ServerErrorIsNotStoredAndRetryRuns": testServerErrorIsNotStored,
}

// server serves h behind a receiver over s (run headers trusted), and returns its URL.
func server(t *testing.T, s receiver.Store, o *receiver.Options, h http.Handler) string {
	t.Helper()
	if o == nil {
		o = &receiver.Options{}
	}
	o.TrustRunHeaders = func(*http.Request) bool { return true }
	rc, err := receiver.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(rc.Wrap(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics the tests provoke
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

type answer struct {
	status int
	header http.Header
	body   string
}

// post sends a POST with key (and run and attempt when run is set); a transport error is
// answered as status 0.
func post(t *testing.T, url, key, body, run string, attempt int) answer {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	if run != "" {
		req.Header.Set("X-Runonce-Run-Id", run)
		req.Header.Set("X-Runonce-Attempt", fmt.Sprint(attempt))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// Many requests with one key at once, as duplicate deliveries and retries of one call
// arrive: the handler runs once; every other request is told it is in flight (409 with
// Retry-After) or given the stored answer, marked as a replay.
func testConcurrentRequestsExecuteOnce(t *testing.T, h Harness) {
	var runs atomic.Int32
	url := server(t, h.Open(t), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(200 * time.Millisecond)
		w.Header().Set("Location", "/charges/1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":1,"execution":%d}`, n)
	}))
	key := uuid.NewString()
	answers, _ := race(32, func(int) (answer, error) { return post(t, url, key, `{"amount":1}`, "", 0), nil })
	originals := 0
	for i, a := range answers {
		switch {
		case a.status == http.StatusCreated && a.header.Get(receiver.HeaderReplayed) == "":
			originals++
		case a.status == http.StatusCreated:
			if a.body != `{"charge":1,"execution":1}` || a.header.Get("Location") != "/charges/1" {
				t.Fatalf("request %d: replay %q (Location %q), want the original's body and Location", i, a.body, a.header.Get("Location"))
			}
		case a.status == http.StatusConflict:
			if a.header.Get("Retry-After") == "" || !strings.Contains(a.body, "#in-flight") {
				t.Fatalf("request %d: 409 without Retry-After or the in-flight problem: %v %s", i, a.header, a.body)
			}
		case a.status == http.StatusServiceUnavailable && strings.Contains(a.body, "#store-unavailable"):
			// a contended store's answer: nothing executed, retry
		default:
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	if originals != 1 || runs.Load() != 1 {
		t.Fatalf("%d original answers, %d executions; want 1 and 1", originals, runs.Load())
	}
	a := post(t, url, key, `{"amount":1}`, "", 0)
	if a.status != http.StatusCreated || a.header.Get(receiver.HeaderReplayed) != "true" || a.body != `{"charge":1,"execution":1}` {
		t.Fatalf("a later request = %d %v %q, want the replayed 201", a.status, a.header, a.body)
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once", runs.Load())
	}
}

// A handler that panics leaves the key to the next request, which executes: the panic is
// never stored, let alone replayed.
func testPanicLeavesTheKeyClaimable(t *testing.T, h Harness) {
	var runs atomic.Int32
	url := server(t, h.Open(t), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("the handler crashed")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	key := uuid.NewString()
	if a := post(t, url, key, "{}", "", 0); a.status != 0 {
		t.Fatalf("a panicking handler's request = %d, want the connection closed", a.status)
	}
	a := post(t, url, key, "{}", "", 0)
	if a.status != http.StatusCreated || a.header.Get(receiver.HeaderReplayed) != "" || runs.Load() != 2 {
		t.Fatalf("the retry after a panic = %d (replayed %q), %d executions; want a fresh 201, 2", a.status, a.header.Get(receiver.HeaderReplayed), runs.Load())
	}
}

// failingRenew is a store whose renewals fail while fail is set, as when the store is
// unreachable from the instance that holds a key.
type failingRenew struct {
	receiver.Store
	fail atomic.Bool
}

func (s *failingRenew) Renew(ctx context.Context, p *receiver.RenewParams) error {
	if s.fail.Load() {
		return errors.New("renewal refused by the test")
	}
	return s.Store.Renew(ctx, p)
}

// A handler that outlives its lease (its renewals fail: the store was unreachable, the
// process stalled) has its context cancelled; another request then takes the key over
// and executes, and the late handler's success, answered while the second execution
// runs, is not stored: the key answers the second execution's response.
func testLostLeaseIsNeverReplayedAsSuccess(t *testing.T, h Harness) {
	s := &failingRenew{Store: h.Open(t)}
	s.fail.Store(true)
	var runs atomic.Int32
	late, cancelled := make(chan struct{}), make(chan error, 1)
	secondStarted, secondGo := make(chan struct{}), make(chan struct{})
	url := server(t, s, &receiver.Options{Lease: shortLease}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-r.Context().Done()
			cancelled <- context.Cause(r.Context())
			<-late // and answer success all the same
			fmt.Fprint(w, "first")
			return
		}
		close(secondStarted)
		<-secondGo
		fmt.Fprint(w, "second")
	}))
	key := uuid.NewString()
	first := make(chan answer, 1)
	go func() { first <- post(t, url, key, "{}", "", 0) }()
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, receiver.ErrLeaseLost) {
			t.Fatalf("the handler's context was cancelled by %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * shortLease):
		t.Fatal("the handler's context was not cancelled when its renewals failed")
	}
	s.fail.Store(false)
	second := make(chan answer, 1)
	go func() {
		for deadline := time.Now().Add(10 * shortLease); ; time.Sleep(100 * time.Millisecond) {
			a := post(t, url, key, "{}", "", 0)
			if a.status != http.StatusConflict || time.Now().After(deadline) {
				second <- a
				return
			}
		}
	}()
	select {
	case <-secondStarted:
	case a := <-second:
		t.Fatalf("the request after the lease passed = %d %q, want it executed", a.status, a.body)
	}
	close(late) // the late handler answers while the second execution holds the key
	if a := <-first; a.body != "first" {
		t.Fatalf("the late handler's client got %d %q, want its own answer", a.status, a.body)
	}
	close(secondGo)
	if a := <-second; a.status != http.StatusOK || a.body != "second" {
		t.Fatalf("the second execution answered %d %q", a.status, a.body)
	}
	for range 3 {
		a := post(t, url, key, "{}", "", 0)
		if a.status != http.StatusOK || a.body != "second" || a.header.Get(receiver.HeaderReplayed) != "true" {
			t.Fatalf("a later request = %d %q (replayed %q), want the second execution's answer replayed", a.status, a.body, a.header.Get(receiver.HeaderReplayed))
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("%d executions, want 2", runs.Load())
	}
}

// Once attempt 2 of a run has reached the service, attempt 1's requests are refused
// without executing, with a problem naming attempt 2; attempt 2's go on.
func testSupersededAttemptNeverExecutes(t *testing.T, h Harness) {
	var mu sync.Mutex
	executed := map[string]int{}
	url := server(t, h.Open(t), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		executed[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	run := uuid.NewString()
	if a := post(t, url, "effect-a", "{}", run, 1); a.status != http.StatusNoContent {
		t.Fatalf("attempt 1 = %d %s", a.status, a.body)
	}
	if a := post(t, url, "effect-a", "{}", run, 2); a.status != http.StatusNoContent || a.header.Get(receiver.HeaderReplayed) != "true" {
		t.Fatalf("attempt 2 of the same effect = %d (replayed %q), want the replay", a.status, a.header.Get(receiver.HeaderReplayed))
	}
	a := post(t, url, "effect-b", "{}", run, 1)
	var p struct {
		Type         string
		Attempt      int64
		NewerAttempt int64  `json:"newer_attempt"`
		RunID        string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.status != http.StatusConflict || a.header.Get("Retry-After") != "" ||
		!strings.HasSuffix(p.Type, "#stale-attempt") || p.Attempt != 1 || p.NewerAttempt != 2 || p.RunID != run {
		t.Fatalf("attempt 1 after attempt 2 = %d %v %s, want 409 stale-attempt naming attempt 2, without Retry-After", a.status, a.header, a.body)
	}
	if a := post(t, url, "effect-b", "{}", run, 2); a.status != http.StatusNoContent || a.header.Get(receiver.HeaderReplayed) != "" {
		t.Fatalf("attempt 2 of a new effect = %d, want executed", a.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if executed["effect-a"] != 1 || executed["effect-b"] != 1 {
		t.Fatalf("executions %v, want one of each effect", executed)
	}
}

func testServerErrorIsNotStored(t *testing.T, h Harness) {
	var runs atomic.Int32
	url := server(t, h.Open(t), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "done")
	}))
	key := uuid.NewString()
	if a := post(t, url, key, "{}", "", 0); a.status != http.StatusServiceUnavailable {
		t.Fatalf("first = %d", a.status)
	}
	if a := post(t, url, key, "{}", "", 0); a.status != http.StatusOK || a.body != "done" || a.header.Get(receiver.HeaderReplayed) != "" {
		t.Fatalf("the retry after a 503 = %d %q, want executed again", a.status, a.body)
	}
	if a := post(t, url, key, "{}", "", 0); a.header.Get(receiver.HeaderReplayed) != "true" || a.body != "done" {
		t.Fatalf("the next = %d %q, want the 200 replayed", a.status, a.body)
	}
}
