package receivertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/receiver"
)

// Benchmark measures what the middleware costs over the store h opens: rounds of 32
// closed-loop HTTP clients alternate, in one process and one run, between a bare no-op
// handler (bare), the same handler behind the receiver with a fresh key each request
// (new: a claim before the handler and a completion after it), the same with runonce's
// run headers of a fresh run each (new-fenced: the claim also writes the run's fence),
// and requests of one completed key (replay: a read). It reports each kind's req/s, p50
// and p99, and the wrapped kinds' rates over the bare one's.
func Benchmark(b *testing.B, h Harness) {
	store := h.Open(b)
	rc, err := receiver.New(store, &receiver.Options{TrustRunHeaders: func(*http.Request) bool { return true }})
	if err != nil {
		b.Fatal(err)
	}
	noop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("POST /bare", noop)
	mux.Handle("POST /wrapped", rc.Wrap(noop))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 30 * time.Second}
	b.Cleanup(client.CloseIdleConnections)

	var prefix [6]byte
	_, _ = rand.Read(prefix[:])
	var seq atomic.Int64
	fresh := func() string { return hex.EncodeToString(prefix[:]) + "-" + strconv.FormatInt(seq.Add(1), 10) }
	post := func(path, key, run string) error {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader([]byte(`{"amount":100,"currency":"eur"}`)))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", key)
		if run != "" {
			req.Header.Set("X-Runonce-Run-Id", run)
			req.Header.Set("X-Runonce-Attempt", "1")
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: status %d", path, resp.StatusCode)
		}
		return nil
	}
	hot := fresh()
	if err := post("/wrapped", hot, ""); err != nil {
		b.Fatal(err)
	}
	rate := benchloop.Rounds(b, 400, []benchloop.Kind{
		{Name: "bare", Op: func(context.Context) error { return post("/bare", fresh(), "") }},
		{Name: "new", Op: func(context.Context) error { return post("/wrapped", fresh(), "") }},
		{Name: "new-fenced", Op: func(context.Context) error { return post("/wrapped", fresh(), fresh()) }},
		{Name: "replay", Op: func(context.Context) error { return post("/wrapped", hot, "") }},
	})
	b.ReportMetric(rate["new"]/rate["bare"], "new/bare")
	b.ReportMetric(rate["new-fenced"]/rate["bare"], "new-fenced/bare")
	b.ReportMetric(rate["replay"]/rate["bare"], "replay/bare")
}
