package redisreceiver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
	"github.com/runonce/runonce/pkg/receiver/redisreceiver"
)

// testURL returns TEST_REDIS_URL; it skips the test when the variable is unset, and fails
// it under CI=true.
func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TEST_REDIS_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("TEST_REDIS_URL is unset under CI=true: scripts/services.sh must start Redis")
		}
		tb.Skip("set TEST_REDIS_URL to run against Redis (eval \"$(scripts/services.sh start DIR)\")")
	}
	return u
}

// client returns a client of the test server, closed in tb.Cleanup.
func client(tb testing.TB) *redis.Client {
	tb.Helper()
	o, err := redis.ParseURL(testURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// newPrefix returns a fresh key prefix whose keys are deleted in tb.Cleanup.
func newPrefix(tb testing.TB, rdb *redis.Client) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "receivertest:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return prefix
}

func open(tb testing.TB) receiver.Store {
	tb.Helper()
	rdb := client(tb)
	s, err := redisreceiver.New(tb.Context(), rdb, &redisreceiver.Options{Prefix: newPrefix(tb, rdb)})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	receivertest.Run(t, receivertest.Harness{Open: open, ExpiresItself: true})
}

func TestOpenByURL(t *testing.T) {
	u := testURL(t) + "?prefix=" + newPrefix(t, client(t))
	s, err := receiver.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := receiver.Open(t.Context(), u+"&eviction=maybe"); err == nil {
		t.Fatal("eviction=maybe was accepted")
	}
}
