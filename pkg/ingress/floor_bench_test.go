package ingress_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// BenchmarkPostgresIngressVsBare alternates rounds of 32 closed-loop HTTP clients, each
// request a fresh key, against: a bare net/http handler that does only the raw claim
// (INSERT … ON CONFLICT DO NOTHING into a one-index table over a pool of 32) and a publish
// waited for, the floor any HTTP ingress on PostgreSQL and the Pub/Sub emulator can reach;
// and runonce's ingress over a PostgreSQL ledger opened from the URL as given (the default
// pool), with pool_max_conns=4 (pgxpool's own default on 2 CPUs, the former default), and
// duplicates of one queued run through the default pool. It reports each rate, p50/p99
// and the ratios to the bare handler. It needs TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST.
func BenchmarkPostgresIngressVsBare(b *testing.B) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		b.Skip("set TEST_DATABASE_URL (and PUBSUB_EMULATOR_HOST): scripts/services.sh start DIR")
	}
	requireEmulator(b)
	ctx := b.Context()
	withParams := func(kv ...string) string {
		u, err := url.Parse(dsn)
		if err != nil {
			b.Fatal(err)
		}
		q := u.Query()
		q.Del("pool_max_conns")
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	newSchema := func() string {
		var r [6]byte
		_, _ = rand.Read(r[:])
		return "ingressbench_" + hex.EncodeToString(r[:])
	}
	runonce := func(pool ...string) *bundle {
		schema := newSchema()
		u := withParams(append([]string{"schema", schema}, pool...)...)
		bn := setup(b, setupOpts{emulator: true, quiet: true, open: func(tb testing.TB) ledger.Ledger {
			l, err := ledger.Open(ctx, u)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				l.Close()
				dropSchema(tb, dsn, schema)
			})
			return l
		}})
		return bn
	}
	def, four := runonce(), runonce("pool_max_conns", "4")
	bare := bareHandler(b, withParams("pool_max_conns", "32"), dsn)
	post, fresh := poster(b)
	hot := fresh() + "-hot"
	if err := post(def.srv.URL, hot); err != nil {
		b.Fatal(err)
	}
	kinds := []kind{
		{"bare", func() error { return post(bare, fresh()) }},
		{"new", func() error { return post(def.srv.URL, fresh()) }},
		{"new-pool4", func() error { return post(four.srv.URL, fresh()) }},
		{"dup", func() error { return post(def.srv.URL, hot) }},
	}
	rate := rounds(b, 400, kinds)
	b.ReportMetric(rate["new"]/rate["bare"], "new/bare")
	b.ReportMetric(rate["new-pool4"]/rate["bare"], "new-pool4/bare")
	b.ReportMetric(rate["dup"]/rate["new"], "dup/new")
}

// poster returns a POST /v1/jobs/bench of the benchmark's payload under a key, over
// one client of up to 64 connections, that fails unless answered 202; and a source of
// fresh keys.
func poster(b *testing.B) (post func(base, key string) error, fresh func() string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	prefix := uuid.NewString()
	var seq atomic.Int64
	post = func(base, key string) error {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/jobs/bench", bytes.NewReader([]byte(payload)))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST %s: status %d", base, resp.StatusCode)
		}
		return nil
	}
	fresh = func() string { return prefix + strconv.FormatInt(seq.Add(1), 10) }
	return post, fresh
}

// kind is one side of a paired benchmark: a name for its metrics and one request.
type kind struct {
	name string
	op   func() error
}

// rounds runs b.N requests of each kind over 32 closed-loop clients, in alternating
// rounds of round requests so that every kind sees the same load, reports each kind's
// rate and p99 and returns the rates by name.
func rounds(b *testing.B, round int, kinds []kind) map[string]float64 {
	const conc = 32
	lat := make([][]time.Duration, len(kinds))
	took := make([]time.Duration, len(kinds))
	ops := 0
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for i, k := range kinds {
			d, l := closedLoop(b, conc, n, k.op)
			took[i] += d
			lat[i] = append(lat[i], l...)
		}
		ops += n
	}
	b.StopTimer()
	rate := map[string]float64{}
	for i, k := range kinds {
		rate[k.name] = float64(ops) / took[i].Seconds()
		slices.Sort(lat[i])
		b.ReportMetric(rate[k.name], k.name+"-req/s")
		b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds())/1000, k.name+"-p50-ms")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Microseconds())/1000, k.name+"-p99-ms")
	}
	return rate
}

// closedLoop runs op ops times over conc goroutines and returns the wall time and each
// op's latency.
func closedLoop(b *testing.B, conc, ops int, op func() error) (time.Duration, []time.Duration) {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conc)
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(ops) {
				t0 := time.Now()
				if err := op(); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return d, slices.Concat(lat...)
}

// bareHandler serves the floor: the raw claim into a one-index table of a fresh schema and
// a publish to the emulator waited for. It returns the server's URL.
func bareHandler(b *testing.B, poolDSN, dsn string) string {
	ctx := b.Context()
	pool, err := pgxpool.New(ctx, poolDSN)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var r [6]byte
	_, _ = rand.Read(r[:])
	schema := "ingressbare_" + hex.EncodeToString(r[:])
	table := pgx.Identifier{schema, "claims"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+`;
		CREATE TABLE `+table+` (key text PRIMARY KEY, payload bytea, created_at timestamptz)`); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dropSchema(b, dsn, schema) })
	pub := barePublisher(b)
	insert := `INSERT INTO ` + table + ` (key, payload, created_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if _, err := pool.Exec(r.Context(), insert, key, body); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		bareAnswer(w, r, pub, key, body)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// barePublisher is a publisher to a fresh topic of the emulator, for a bare handler.
func barePublisher(b *testing.B) *queue.Publisher {
	ctx := b.Context()
	c, err := queue.NewClient(ctx, "runonce-test", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	topic := "bare-" + randomSuffix()
	if _, err := queue.EnsureTopic(ctx, c, topic); err != nil {
		b.Fatal(err)
	}
	pub := queue.NewPublisher(c, topic, nil)
	b.Cleanup(func() { pub.Close() })
	return pub
}

// bareAnswer publishes a bare handler's claim, waiting for it, and answers 202.
func bareAnswer(w http.ResponseWriter, r *http.Request, pub *queue.Publisher, key string, body []byte) {
	id := ledger.Identity{RunID: key, Job: "bench", Key: key, Payload: body}
	if _, err := pub.Publish(r.Context(), &queue.Message{Identity: id}); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"run_id":"`+key+`","status":"queued"}`)
}

func dropSchema(tb testing.TB, dsn, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		tb.Errorf("drop schema %s: %v", schema, err)
	}
}

// BenchmarkFirestoreIngressVsBare alternates rounds of 32 closed-loop HTTP clients, each
// request a fresh key, against: a bare net/http handler that does only the raw claim (a
// Firestore Create of a fresh document, one write that fails if it exists) and a publish
// waited for, the floor any HTTP ingress on Firestore and the Pub/Sub emulator can reach;
// runonce's ingress over a Firestore ledger; and duplicates of one queued run through it.
// It reports each rate, p50/p99 and the ratios to the bare handler. It needs
// FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST.
func BenchmarkFirestoreIngressVsBare(b *testing.B) {
	if os.Getenv("FIRESTORE_EMULATOR_HOST") == "" {
		b.Skip("set FIRESTORE_EMULATOR_HOST (and PUBSUB_EMULATOR_HOST): scripts/services.sh start DIR")
	}
	requireEmulator(b)
	ctx := b.Context()
	var r [6]byte
	_, _ = rand.Read(r[:])
	prefix := "ingressbench" + hex.EncodeToString(r[:]) + "_"
	bn := setup(b, setupOpts{emulator: true, quiet: true, open: func(tb testing.TB) ledger.Ledger {
		l, err := ledger.Open(ctx, "firestore://runonce-test?prefix="+prefix)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { l.Close() })
		return l
	}})
	bare := bareFirestoreHandler(b, prefix+"bare")
	post, fresh := poster(b)
	hot := fresh() + "-hot"
	if err := post(bn.srv.URL, hot); err != nil {
		b.Fatal(err)
	}
	rate := rounds(b, 400, []kind{
		{"bare", func() error { return post(bare, fresh()) }},
		{"new", func() error { return post(bn.srv.URL, fresh()) }},
		{"dup", func() error { return post(bn.srv.URL, hot) }},
	})
	b.ReportMetric(rate["new"]/rate["bare"], "new/bare")
	b.ReportMetric(rate["dup"]/rate["new"], "dup/new")
}

// bareFirestoreHandler serves the Firestore floor: a Create of a fresh document of
// collection and a publish to the emulator waited for. It returns the server's URL.
func bareFirestoreHandler(b *testing.B, collection string) string {
	ctx := b.Context()
	fc, err := firestore.NewClient(ctx, "runonce-test")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fc.Close() })
	pub := barePublisher(b)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if _, err := fc.Collection(collection).Doc(key).Create(r.Context(), map[string]any{
			"payload": body, "created_at": firestore.ServerTimestamp}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		bareAnswer(w, r, pub, key, body)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}
