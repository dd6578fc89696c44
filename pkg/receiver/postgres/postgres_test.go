package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/postgres"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
)

// testDSN returns TEST_DATABASE_URL; it skips the test when the variable is unset, and
// fails it under CI=true.
func testDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("TEST_DATABASE_URL is unset under CI=true: scripts/services.sh must start PostgreSQL")
		}
		tb.Skip("set TEST_DATABASE_URL to run against PostgreSQL (eval \"$(scripts/services.sh start DIR)\")")
	}
	return dsn
}

// newSchema returns a fresh schema name, dropped in tb.Cleanup.
func newSchema(tb testing.TB, dsn string) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "receivertest_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

func open(tb testing.TB) receiver.Store {
	tb.Helper()
	dsn := testDSN(tb)
	s, err := postgres.Open(tb.Context(), dsn, &postgres.Options{Schema: newSchema(tb, dsn)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { receivertest.Run(t, receivertest.Harness{Open: open}) }

func TestOpenByURL(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	s, err := receiver.Open(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.(*postgres.Store).Schema(); got != schema {
		t.Fatalf("schema = %q, want %q", got, schema)
	}
	// Opening again finds the tables (and replaces the function with itself).
	again, err := receiver.Open(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	q.Set("migrate", "maybe")
	u.RawQuery = q.Encode()
	if _, err := receiver.Open(t.Context(), u.String()); err == nil {
		t.Fatal("migrate=maybe was accepted")
	}
}

// BenchmarkMiddlewareVsBare measures the receiver over PostgreSQL against the bare
// handler (receivertest.Benchmark).
func BenchmarkMiddlewareVsBare(b *testing.B) {
	receivertest.Benchmark(b, receivertest.Harness{Open: open})
}
