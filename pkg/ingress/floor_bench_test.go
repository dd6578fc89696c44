package ingress_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/internal/benchbase"
	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
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
		bn := setup(b, setupOpts{emulator: true, quiet: true, open: func(tb testing.TB) ledger.Driver {
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
	bare := benchbase.BarePostgres(b, withParams("pool_max_conns", "32"), "runonce-test")
	post, fresh := benchbase.Poster(b, "/v1/jobs/bench", payload)
	hot := fresh() + "-hot"
	if err := post(def.srv.URL, hot); err != nil {
		b.Fatal(err)
	}
	rate := benchloop.Rounds(b, 400, []benchloop.Kind{
		{Name: "bare", Op: func(context.Context) error { return post(bare, fresh()) }},
		{Name: "new", Op: func(context.Context) error { return post(def.srv.URL, fresh()) }},
		{Name: "new-pool4", Op: func(context.Context) error { return post(four.srv.URL, fresh()) }},
		{Name: "dup", Op: func(context.Context) error { return post(def.srv.URL, hot) }},
	})
	b.ReportMetric(rate["new"]/rate["bare"], "new/bare")
	b.ReportMetric(rate["new-pool4"]/rate["bare"], "new-pool4/bare")
	b.ReportMetric(rate["dup"]/rate["new"], "dup/new")
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
// Each kind first runs untimed, in blocks of firestoreWarmup, until the emulator has
// stopped getting faster (benchloop.Warm). It reports each rate, p50/p99 and the ratios
// to the bare handler, and the requests the warm-up took (warm-ops). It needs
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
	bn := setup(b, setupOpts{emulator: true, quiet: true, open: func(tb testing.TB) ledger.Driver {
		l, err := ledger.Open(ctx, "firestore://runonce-test?prefix="+prefix)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { l.Close() })
		return l
	}})
	bare := benchbase.BareFirestore(b, "runonce-test", prefix+"bare")
	post, fresh := benchbase.Poster(b, "/v1/jobs/bench", payload)
	hot := fresh() + "-hot"
	if err := post(bn.srv.URL, hot); err != nil {
		b.Fatal(err)
	}
	kinds := []benchloop.Kind{
		{Name: "bare", Op: func(context.Context) error { return post(bare, fresh()) }},
		{Name: "new", Op: func(context.Context) error { return post(bn.srv.URL, fresh()) }},
		{Name: "dup", Op: func(context.Context) error { return post(bn.srv.URL, hot) }},
	}
	// The emulator serves several times faster after its first tens of thousands of
	// requests: unwarmed, the first repetitions timed its warm-up, in which both kinds
	// wait on it; warmed by a fixed 4,000 of each, the machine's CPU per bare request
	// still fell from one repetition to the next (595, 485, 305 µs in one run).
	warm := benchloop.Warm(b, 32, firestoreWarmup, kinds)
	rate := benchloop.Rounds(b, 400, kinds)
	b.ReportMetric(float64(warm), "warm-ops")
	b.ReportMetric(rate["new"]/rate["bare"], "new/bare")
	b.ReportMetric(rate["dup"]/rate["new"], "dup/new")
}

// firestoreWarmup is how many requests of each kind make one block of the warm-up of
// BenchmarkFirestoreIngressVsBare.
const firestoreWarmup = 2000
