package benchbase

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// The floors of an HTTP ingress: bare net/http handlers that do only the raw claim and a
// publish waited for, the least any ingress on these services can do per request.

// BarePostgres serves the PostgreSQL floor: INSERT … ON CONFLICT DO NOTHING into a
// one-index table of a fresh schema (dropped at the end), over a pool opened from
// poolDSN, and a publish to a fresh topic of project on the Pub/Sub emulator. It returns
// the server's URL.
func BarePostgres(b *testing.B, poolDSN, project string) string {
	ctx := b.Context()
	pool, err := pgxpool.New(ctx, poolDSN)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	schema := pgx.Identifier{"bare_" + randomHex()}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema+`;
		CREATE TABLE `+schema+`.claims (key text PRIMARY KEY, payload bytea, created_at timestamptz)`); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(b.Context(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	insert := `INSERT INTO ` + schema + `.claims (key, payload, created_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`
	return bareServer(b, project, func(r *http.Request, key string, body []byte) error {
		_, err := pool.Exec(r.Context(), insert, key, body)
		return err
	})
}

// BareFirestore serves the Firestore floor: a Create of a fresh document of collection
// (one write, failing if it exists) on project's database, and a publish waited for. It
// returns the server's URL.
func BareFirestore(b *testing.B, project, collection string) string {
	fc, err := firestore.NewClient(b.Context(), project)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fc.Close() })
	return bareServer(b, project, func(r *http.Request, key string, body []byte) error {
		_, err := fc.Collection(collection).Doc(key).Create(r.Context(), map[string]any{
			"payload": body, "created_at": firestore.ServerTimestamp})
		return err
	})
}

// bareServer serves claim (keyed by the Idempotency-Key header) and a publish to a fresh
// topic of project, waited for, and answers 202.
func bareServer(b *testing.B, project string, claim func(r *http.Request, key string, body []byte) error) string {
	ctx := b.Context()
	c, err := queue.NewClient(ctx, project, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	topic := "bare-" + randomHex()
	if _, err := queue.EnsureTopic(ctx, c, topic); err != nil {
		b.Fatal(err)
	}
	pub := queue.NewPublisher(c, topic, nil)
	b.Cleanup(func() { pub.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if err := claim(r, key, body); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		id := ledger.Identity{RunID: key, Job: "bench", Key: key, Payload: body}
		if _, err := pub.Publish(r.Context(), &queue.Message{Identity: id}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"run_id":"`+key+`","status":"queued"}`)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

func randomHex() string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// Poster returns post, which POSTs payload to base+path under an Idempotency-Key over
// one client of up to 64 connections and fails unless answered with one of the statuses
// ok (202 when none is given); and fresh, a source of keys not used before.
func Poster(b *testing.B, path, payload string, ok ...int) (post func(base, key string) error, fresh func() string) {
	if len(ok) == 0 {
		ok = []int{http.StatusAccepted}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 30 * time.Second}
	b.Cleanup(client.CloseIdleConnections)
	prefix := randomHex() + "-"
	var seq atomic.Int64
	post = func(base, key string) error {
		req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader([]byte(payload)))
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
		if !slices.Contains(ok, resp.StatusCode) {
			return fmt.Errorf("POST %s%s: status %d", base, path, resp.StatusCode)
		}
		return nil
	}
	fresh = func() string { return prefix + strconv.FormatInt(seq.Add(1), 10) }
	return post, fresh
}
