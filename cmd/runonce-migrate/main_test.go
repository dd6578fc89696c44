package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/internal/config"
)

func TestMigrate(t *testing.T) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is unset under CI=true")
		}
		t.Skip("set TEST_DATABASE_URL to run against PostgreSQL")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "migratetest_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	env := config.Env{"RUNONCE_LEDGER": dsn}
	for i, want := range []string{"applied [1 2 3 4 5 6 7 8 9 10]; now at version 10", "up to date at version 10"} {
		var out bytes.Buffer
		if err := run(t.Context(), []string{"-schema", schema}, env, &out, io.Discard); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if got := strings.TrimSpace(out.String()); got != want {
			t.Fatalf("run %d printed %q, want %q", i, got, want)
		}
	}
	if err := run(t.Context(), []string{"-ledger", "sqlite:///tmp/x.db"}, nil, &bytes.Buffer{}, io.Discard); err == nil {
		t.Fatal("a sqlite URL was accepted")
	}
}
