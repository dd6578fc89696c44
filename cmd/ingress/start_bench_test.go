package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/memqueue"
)

// BenchmarkTimeToStart measures the time from the ingress's 202 to the job's first line,
// as a user sees it: the job is an HTTP target in this process (the jobs file's one job,
// "start"), whose handler notes the time it is called before it reads the request, and
// the 202 is noted when the client has read the answer. Runs are posted at a steady 100
// a second from 8 clients, a fresh Idempotency-Key each, so that the latency is the
// path's and not a queue's. Per backend:
//
//   - sqlite-dev: the built binary with -dev and the jobs file (the SQLite file, the
//     in-process MemTopic, the in-process worker); its floor, a raw publish→receive on a
//     queue.MemTopic in this process;
//   - postgres and firestore: the built cmd/ingress and one cmd/worker (-concurrency 32)
//     over a PostgreSQL ledger (TEST_DATABASE_URL) or a Firestore one (the emulator), with
//     the Pub/Sub emulator between them; their floor, a raw publish→receive on the
//     emulator with runonce's publisher and subscriber settings (queue.Publisher, whose
//     publish is waited for as the ingress waits for it, and queue.Subscriber), from the
//     publish's result to the receive.
//
// An HTTP job's first line comes after the worker's claim and its effect's begin record
// (worker.HTTPTarget calls the target inside worker.Effect): both are in the figure.
// Rounds of each side alternate after one untimed round of each; it reports runonce-p50-ms,
// runonce-p99-ms, floor-p50-ms and floor-p99-ms. It needs TEST_DATABASE_URL,
// PUBSUB_EMULATOR_HOST and FIRESTORE_EMULATOR_HOST.
//
//	go test -run '^$' -bench BenchmarkTimeToStart -benchtime 1000x ./cmd/ingress/
func BenchmarkTimeToStart(b *testing.B) {
	if os.Getenv("FIRESTORE_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("FIRESTORE_EMULATOR_HOST must be set under CI=true (scripts/services.sh)")
		}
		b.Skip("set FIRESTORE_EMULATOR_HOST: scripts/services.sh start DIR")
	}
	s := newStack(b) // skips without PostgreSQL and the Pub/Sub emulator; builds the binaries
	target := newStartTarget(b)
	target.logs = s.bins
	s.jobs = filepath.Join(s.bins, "start-jobs.json")
	if err := os.WriteFile(s.jobs, []byte(`{"jobs": {"start": {"url": "`+target.url+`", "method": "POST"}}}`), 0o644); err != nil {
		b.Fatal(err)
	}
	// The processes start once, here, not in the sub-benchmarks, whose function runs
	// twice (b.N = 1, then the -benchtime); each pair on a topic and subscription of
	// its own.
	dev := startDevBench(b, filepath.Join(s.bins, "ingress"), b.TempDir(), "-jobs", s.jobs)
	defer dev.stop(b)
	pg := s.startPair(b)
	fs := *s
	fs.ledgerURL = "firestore://" + benchProject + "?prefix=startbench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "_"
	fs.topic, fs.sub = s.topic+"_fs", s.sub+"_fs"
	ensureTopic(b, s.schema+"_fs")
	fsBase := fs.startPair(b)
	b.Run("backend=sqlite-dev", func(b *testing.B) { startRounds(b, target, "http://"+dev.addr, memFloor(b)) })
	b.Run("backend=postgres", func(b *testing.B) { startRounds(b, target, pg, s.pubsubFloor(b)) })
	b.Run("backend=firestore", func(b *testing.B) { startRounds(b, target, fsBase, s.pubsubFloor(b)) })
}

// ensureTopic makes the topic id and its subscription id on the Pub/Sub emulator.
func ensureTopic(b *testing.B, id string) {
	ctx := b.Context()
	c, err := queue.NewClient(ctx, benchProject, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := queue.EnsureTopic(ctx, c, id); err != nil {
		b.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, c, id, id, nil); err != nil {
		b.Fatal(err)
	}
}

// startPair starts cmd/ingress and one cmd/worker over the stack's ledger and Pub/Sub and
// returns the ingress's base URL.
func (s *stack) startPair(b *testing.B) string {
	ing := s.start(b, "ingress", "-topic", s.topic)
	s.start(b, "worker", "-subscription", s.sub, "-concurrency", "32")
	return "http://" + ing.addr
}

// startTarget is the job "start": it notes when each run's call came in, by the key in
// its payload ({"k": KEY}), the first call of a run only.
type startTarget struct {
	url  string
	logs string // a directory whose *.log files are shown when runs do not start
	mu   sync.Mutex
	at   map[string]time.Time
}

func newStartTarget(b *testing.B) *startTarget {
	t := &startTarget{at: map[string]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		var p struct{ K string }
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.K == "" {
			http.Error(w, fmt.Sprintf("payload %v: want {\"k\": KEY}", err), http.StatusBadRequest)
			return
		}
		t.note(p.K, now)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	t.url = srv.URL
	return t
}

func (t *startTarget) note(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.at[key]; !ok {
		t.at[key] = at
	}
}

// wait returns, for each key, the time its call came in, waiting up to 2 minutes for
// all of them.
func (t *startTarget) wait(b *testing.B, side string, keys []string) []time.Time {
	out := make([]time.Time, len(keys))
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Millisecond) {
		t.mu.Lock()
		missing := 0
		for i, k := range keys {
			if at, ok := t.at[k]; ok {
				out[i] = at
			} else {
				missing++
			}
		}
		t.mu.Unlock()
		if missing == 0 {
			return out
		}
		if time.Now().After(deadline) {
			if t.logs != "" {
				logs, _ := filepath.Glob(filepath.Join(t.logs, "*.log"))
				for _, l := range logs {
					out, _ := os.ReadFile(l)
					b.Logf("%s:\n%s", l, out[max(0, len(out)-4000):])
				}
			}
			b.Fatalf("%s: %d of %d runs not started within 2 minutes", side, missing, len(keys))
		}
	}
}

// A floor publishes a message whose key is KEY and returns when the publish is done
// (its result in); received notes when each key's message came in.
type floor struct {
	publish  func(ctx context.Context, key string) error
	received *startTarget
}

func floorMessage(key string) *queue.Message {
	return &queue.Message{Identity: ledger.Identity{RunID: ledger.KeyedRunID("ns", "start", key), Namespace: "ns",
		Job: "start", Key: key, PayloadHash: ledger.PayloadHash(nil)}, EnqueuedAt: time.Now()}
}

// memFloor is a raw publish→receive on a queue.MemTopic in this process, -dev's transport.
func memFloor(b *testing.B) floor {
	topic := memqueue.NewTopic("startfloor")
	b.Cleanup(func() { _ = topic.Close() })
	if err := topic.CreateSubscription("startfloor", nil); err != nil {
		b.Fatal(err)
	}
	sub, err := topic.Subscriber("startfloor", &queue.SubscriberOptions{Concurrency: 32})
	if err != nil {
		b.Fatal(err)
	}
	got := &startTarget{at: map[string]time.Time{}}
	receive(b, func(ctx context.Context) error {
		return sub.Receive(ctx, nil, func(_ context.Context, d *queue.Delivery) { got.note(d.Message.Identity.Key, time.Now()); d.Ack() })
	})
	pub := topic.Publisher()
	return floor{received: got, publish: func(ctx context.Context, key string) error {
		_, err := pub.Publish(ctx, floorMessage(key))
		return err
	}}
}

// pubsubFloor is a raw publish→receive on the Pub/Sub emulator, on a topic and
// subscription of its own, with runonce's publisher and subscriber settings.
func (s *stack) pubsubFloor(b *testing.B) floor {
	ctx := b.Context()
	c, err := queue.NewClient(ctx, benchProject, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	id := s.schema + "_floor_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	ensureTopic(b, id)
	got := &startTarget{at: map[string]time.Time{}}
	sub := queue.NewSubscriber(c, id, &queue.SubscriberOptions{Concurrency: 32})
	receive(b, func(ctx context.Context) error {
		return sub.Receive(ctx, nil, func(_ context.Context, d *queue.Delivery) { got.note(d.Message.Identity.Key, time.Now()); d.Ack() })
	})
	pub := queue.NewPublisher(c, id, nil)
	b.Cleanup(func() { _ = pub.Close() })
	return floor{received: got, publish: func(ctx context.Context, key string) error {
		_, err := pub.Publish(ctx, floorMessage(key))
		return err
	}}
}

// receive runs f until the benchmark ends.
func receive(b *testing.B, f func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f(ctx) }()
	b.Cleanup(func() { cancel(); <-errc })
}

// Runs are posted (and the floor's messages published) at startRate a second from
// startClients clients, in rounds of startRound.
const (
	startRate    = 100
	startClients = 8
	startRound   = 200
)

// startRounds alternates rounds of runs posted to the ingress at base and of the floor's
// messages, after one untimed round of each, until b.N of each, and reports the p50 and
// p99 of each side's time to start.
func startRounds(b *testing.B, target *startTarget, base string, fl floor) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: startClients * 2}, Timeout: 30 * time.Second}
	prefix := strings.ReplaceAll(uuid.NewString(), "-", "")
	var seq atomic.Int64
	// post posts run key and notes when its 202 was read.
	post := func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/jobs/start", strings.NewReader(`{"k":"`+key+`"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST run %s: %d %s", key, resp.StatusCode, body)
		}
		return nil
	}
	sides := []struct {
		name string
		send func(ctx context.Context, key string) error
		seen *startTarget
	}{{"runonce", post, target}, {"floor", fl.publish, fl.received}}
	lat := make([][]time.Duration, len(sides))
	// round sends n of side i's and returns each one's time to start.
	round := func(i, n int) []time.Duration {
		keys := make([]string, n)
		for k := range keys {
			keys[k] = fmt.Sprintf("%s-%d", prefix, seq.Add(1))
		}
		sent, err := paced(b.Context(), n, func(ctx context.Context, k int) error { return sides[i].send(ctx, keys[k]) })
		if err != nil {
			b.Fatalf("%s: %v", sides[i].name, err)
		}
		started := sides[i].seen.wait(b, sides[i].name, keys)
		out := make([]time.Duration, n)
		for k := range out {
			// A job can start before its 202 is read; its time to start is then 0.
			out[k] = max(started[k].Sub(sent[k]), 0)
		}
		return out
	}
	for i := range sides {
		round(i, startRound)
	}
	b.ResetTimer()
	for r, done := 0, 0; done < b.N; r, done = r+1, done+startRound {
		n := min(startRound, b.N-done)
		for k := range sides {
			i := (r + k) % len(sides)
			lat[i] = append(lat[i], round(i, n)...)
		}
	}
	b.StopTimer()
	for i, s := range sides {
		slices.Sort(lat[i])
		b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds())/1000, s.name+"-p50-ms")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Microseconds())/1000, s.name+"-p99-ms")
	}
}

// paced runs send(k) for k in [0, n) from startClients goroutines, send k due at start +
// k/startRate (a client late for its slot sends at once), and returns when each send
// returned.
func paced(ctx context.Context, n int, send func(ctx context.Context, k int) error) ([]time.Time, error) {
	done := make([]time.Time, n)
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range startClients {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n || failed.Load() != nil {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(k) * time.Second / startRate)))
				if err := send(ctx, k); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				done[k] = time.Now()
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	return done, nil
}
