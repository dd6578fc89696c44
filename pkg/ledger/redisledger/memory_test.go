package redisledger

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/memqueue"
	"github.com/runonce/runonce/pkg/worker"
)

// TestEvictionPolicy: Open refuses a server whose maxmemory-policy can evict (read with
// CONFIG GET, or from INFO memory where CONFIG is refused, as on Memorystore), naming the
// policy, why and the fix; eviction=warn logs the finding and opens; noeviction opens; a
// server that tells its policy neither way is refused unless eviction=ignore.
func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--maxmemory-policy", "volatile-lru")
	ctx := t.Context()
	admin := redis.NewClient(&redis.Options{Addr: s.addr()})
	t.Cleanup(func() { _ = admin.Close() })
	// Memorystore answers CONFIG GET with NOPERM: so does a user without @config here.
	for user, rules := range map[string][]any{
		"noconfig": {"-config"},
		"blind":    {"-config", "-info"},
	} {
		args := append([]any{"ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"}, rules...)
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) string {
		if user == "" {
			return s.url()
		}
		return "redis://" + user + ":pw@" + s.addr() + "/0"
	}
	setPolicy := func(t *testing.T, policy string) {
		t.Helper()
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// persistence=ignore: the server has no append-only file, which is not this test's.
	const base = "?persistence=ignore"

	for _, tc := range []struct{ policy, user, source, why string }{
		{"volatile-lru", "", "CONFIG GET maxmemory-policy", "every run and effect record of the ledger has one"},
		{"allkeys-lru", "", "CONFIG GET maxmemory-policy", "evicts any key"},
		{"volatile-ttl", "noconfig", "INFO memory", "every run and effect record of the ledger has one"},
		{"allkeys-lfu", "noconfig", "INFO memory", "evicts any key"},
	} {
		t.Run("Refuses/"+tc.policy+"/"+tc.source, func(t *testing.T) {
			setPolicy(t, tc.policy)
			l, err := Open(ctx, as(tc.user)+base, nil)
			if err == nil {
				l.Close()
				t.Fatalf("Open on a server with maxmemory-policy %s succeeded, want ErrMayEvict", tc.policy)
			}
			if !errors.Is(err, ErrMayEvict) {
				t.Fatalf("Open = %v, want ErrMayEvict", err)
			}
			for _, want := range []string{"maxmemory-policy is " + tc.policy + " (" + tc.source + ")", tc.why,
				"runs it again", "CONFIG SET maxmemory-policy noeviction", "Memorystore", "eviction=warn"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open's error %q does not say %q", err, want)
				}
			}
		})
	}

	t.Run("WarnOpens", func(t *testing.T) {
		setPolicy(t, "volatile-lru")
		var logs bytes.Buffer
		l, err := Open(ctx, as("noconfig")+base+"&eviction=warn", &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("Open with eviction=warn: %v", err)
		}
		defer l.Close()
		if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "maxmemory-policy is volatile-lru (INFO memory)") ||
			!strings.Contains(got, "eviction=warn") {
			t.Fatalf("eviction=warn logged %q, want a warning naming the policy", got)
		}
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: ledger.KeyedRunID("evict", "job", uuid.NewString())}, AttemptID: "a"}); err != nil {
			t.Fatalf("Claim on the ledger opened with eviction=warn: %v", err)
		}
	})

	for _, user := range []string{"", "noconfig"} {
		t.Run("NoevictionOpens/"+cmp.Or(user, "config"), func(t *testing.T) {
			setPolicy(t, "noeviction")
			var logs bytes.Buffer
			l, err := Open(ctx, as(user)+base, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("Open on a noeviction server: %v", err)
			}
			l.Close()
			if strings.Contains(logs.String(), "maxmemory") {
				t.Fatalf("Open on a noeviction server logged %q", logs.String())
			}
		})
	}

	t.Run("NeitherAnswers", func(t *testing.T) {
		setPolicy(t, "noeviction")
		_, err := Open(ctx, as("blind")+base, nil)
		if !errors.Is(err, ErrMayEvict) || !strings.Contains(err.Error(), "cannot read the server's maxmemory-policy") ||
			!strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "eviction=ignore") {
			t.Fatalf("Open on a server that hides its policy = %v, want ErrMayEvict saying it cannot read it and how to vouch for it", err)
		}
		l, err := Open(ctx, as("blind")+base+"&eviction=ignore", nil)
		if err != nil {
			t.Fatalf("Open with eviction=ignore on a server that hides its policy: %v", err)
		}
		l.Close()
	})
}

// fillClaims claims new runs with a payload of size bytes from 8 goroutines until the
// server has refused want claims, and answers the claims it acknowledged (run ID →
// attempt ID) and the run IDs of those it refused with their errors.
func fillClaims(t *testing.T, l *Ledger, size, want int) (acked map[string]string, refused map[string]error) {
	t.Helper()
	ctx := t.Context()
	payload := bytes.Repeat([]byte("x"), size)
	acked, refused = map[string]string{}, map[string]error{}
	var (
		mu       sync.Mutex
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for range 8 {
		wg.Go(func() {
			for failures.Load() < int64(want) && time.Now().Before(deadline) {
				id := ledger.Identity{RunID: ledger.KeyedRunID("oom", "job", uuid.NewString()), Namespace: "oom", Job: "job",
					PayloadHash: ledger.PayloadHash(payload), Payload: payload}
				attempt := uuid.NewString()
				_, err := l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: attempt})
				mu.Lock()
				if err == nil {
					acked[id.RunID] = attempt
				} else {
					refused[id.RunID] = err
					failures.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked, refused
}

// TestOutOfMemoryLosesNothing fills a noeviction server with a small maxmemory with
// claims: every claim it acknowledged is still there, with its attempt; every one it
// refused answers ErrOutOfMemory (retryable, saying nothing was written) and left no
// record. Once the server is full, a duplicate of an acknowledged claim is still
// answered (a read), through the ingress too (202), a new claim through the ingress is
// 503 with Retry-After, and a worker nacks the delivery of an acknowledged run without
// running its job.
func TestOutOfMemoryLosesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	ctx := t.Context()
	l, err := Open(ctx, s.url()+"?persistence=ignore", nil)
	if err != nil {
		t.Fatalf("Open on a noeviction server: %v", err)
	}
	defer l.Close()

	topic := memqueue.NewTopic("oom")
	t.Cleanup(func() { _ = topic.Close() })
	h, err := ingress.New(&ingress.Config{Ledger: ledger.New(l, nil), Publisher: topic.Publisher(), Namespace: "oom", Jobs: []string{"report"},
		Auth: auth.None{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(key string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/jobs/report", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	if resp := post("before-full"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the ingress's claim before the server is full = %d, want 202", resp.StatusCode)
	}

	acked, refused := fillClaims(t, l, 4<<10, 100)
	t.Logf("%d claims acknowledged, %d refused", len(acked), len(refused))
	if len(acked) == 0 || len(refused) == 0 {
		t.Fatalf("%d claims acknowledged, %d refused: the server never filled", len(acked), len(refused))
	}
	for id, err := range refused {
		if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, ledger.ErrUnavailable) || !ledger.Retryable(err) ||
			!strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("refused claim of %s = %v, want ErrOutOfMemory wrapping ledger.ErrUnavailable, saying nothing was written", id, err)
		}
		if _, err := l.Get(ctx, &ledger.GetParams{RunID: id}); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("the refused claim of %s left a record (%v): something was written", id, err)
		}
	}
	for id, attempt := range acked {
		r, err := l.Get(ctx, &ledger.GetParams{RunID: id})
		if err != nil || r.AttemptID != attempt || r.Status != ledger.StatusQueued {
			t.Fatalf("acknowledged claim %s after the server filled = %+v, %v; want it queued with attempt ID %s", id, r, err, attempt)
		}
	}

	// Pin the server full, whatever its clients' buffers free, for what follows.
	admin := redis.NewClient(&redis.Options{Addr: s.addr()})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	var some string
	for id := range acked {
		some = id
		break
	}
	dup, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: some, Namespace: "oom", Job: "job",
		PayloadHash: ledger.PayloadHash(bytes.Repeat([]byte("x"), 4<<10))}, AttemptID: uuid.NewString()})
	if err != nil || dup.Created || dup.Run.AttemptID != acked[some] {
		t.Fatalf("duplicate claim on the full server = %+v, %v; want the acknowledged run", dup, err)
	}
	if resp := post("before-full"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the ingress's duplicate on the full server = %d, want 202", resp.StatusCode)
	}
	if resp := post("after-full"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the ingress's new claim on the full server = %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	mux := worker.NewMux()
	var ran atomic.Int32
	mux.HandleFunc("job", func(context.Context, *worker.Job) error { ran.Add(1); return nil })
	w, err := worker.New(&worker.Config{Ledger: ledger.New(l, nil), Handler: mux, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.CancelJobs)
	run, err := l.Get(ctx, &ledger.GetParams{RunID: some})
	if err != nil {
		t.Fatal(err)
	}
	m := &queue.Message{Identity: ledger.Identity{RunID: run.ID, Namespace: run.Namespace, Job: run.Job, Key: run.Key,
		ScheduleTime: run.ScheduleTime, PayloadHash: run.PayloadHash, Payload: run.Payload}, EnqueuedAt: run.CreatedAt}
	v := w.Process(ctx, &queue.Delivery{Message: m, PublishTime: time.Now()})
	if v.Ack || ran.Load() != 0 {
		t.Fatalf("the worker's delivery on the full server: verdict %+v, job ran %d times; want a nack and no run", v, ran.Load())
	}
	if r, err := l.Get(ctx, &ledger.GetParams{RunID: some}); err != nil || r.Status != ledger.StatusQueued || r.Attempt != 0 {
		t.Fatalf("the run after the worker's refused claim = %+v, %v; want it queued, untouched", r, err)
	}
}

// TestEvictionLosesAcknowledgedClaims shows why Open refuses an evicting policy: with
// volatile-lru (Memorystore's default) and a small maxmemory, claims of more data than
// fits are all acknowledged, some are then gone, and the scheduler's retry of a lost one
// creates it anew: the run would run again.
func TestEvictionLosesAcknowledgedClaims(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--maxmemory", "8mb", "--maxmemory-policy", "volatile-lru")
	ctx := t.Context()
	l, err := Open(ctx, s.url()+"?persistence=ignore&eviction=warn", &Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Open with eviction=warn: %v", err)
	}
	defer l.Close()
	payload := bytes.Repeat([]byte("x"), 4<<10)
	const claims = 2000 // 2,000 runs of 4 KiB: about 10 MB, more than 8 MB holds
	ids := make([]ledger.Identity, claims)
	for i := range ids {
		ids[i] = ledger.Identity{RunID: ledger.KeyedRunID("evict", "job", fmt.Sprint(i)), Namespace: "evict", Job: "job",
			PayloadHash: ledger.PayloadHash(payload), Payload: payload}
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ids[i], AttemptID: "first"}); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	var lost []ledger.Identity
	for _, id := range ids {
		if _, err := l.Get(ctx, &ledger.GetParams{RunID: id.RunID}); errors.Is(err, ledger.ErrNotFound) {
			lost = append(lost, id)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("volatile-lru, maxmemory 8mb: %d of %d acknowledged claims lost", len(lost), claims)
	if len(lost) == 0 {
		t.Fatalf("no acknowledged claim lost of %d under volatile-lru: the test did not fill the server", claims)
	}
	retry, err := l.Claim(ctx, &ledger.ClaimParams{Identity: lost[0], AttemptID: "retry"})
	if err != nil || !retry.Created {
		t.Fatalf("the retry of an evicted claim = %+v, %v; want it created anew (the run would run again)", retry, err)
	}
}
