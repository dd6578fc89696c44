package ingress_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/coreos/go-oidc/v3/oidc/oidctest"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/queue"
)

// TestEmulatorEndToEnd runs the main rows of the contract and the 64-request race
// against the official Pub/Sub emulator, and pulls what was published.
func TestEmulatorEndToEnd(t *testing.T) {
	requireEmulator(t)
	t.Parallel()
	type target struct {
		name string
		opts setupOpts
	}
	var targets []target
	for bi, be := range backends {
		targets = append(targets, target{be.name, setupOpts{backend: bi}})
	}
	for _, sb := range serviceBackends() {
		targets = append(targets, target{sb.name, setupOpts{open: sb.open}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			o := tg.opts
			o.emulator, o.quiet, o.namespace = true, true, "e2e/"+strings.ReplaceAll(randomSuffix(), ".", "")
			b := setup(t, o)
			c, err := queue.NewClient(ctx, "runonce-test", nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			sub, err := queue.EnsureSubscription(ctx, c, b.topic, b.topic+"-sub", nil)
			if err != nil {
				t.Fatal(err)
			}
			if r := b.do(t, "GET", "/readyz", nil, ""); r.status != 200 {
				t.Fatalf("readyz %d %v", r.status, r.body)
			}
			st := tick()
			var wg sync.WaitGroup
			replies := make([]reply, 64)
			for i := range replies {
				wg.Go(func() {
					hdr := map[string]string{"x-cloudscheduler-jobname": "emu", "X-CloudScheduler-ScheduleTime": st.In(time.FixedZone("", (i%5-2)*3600)).Format(time.RFC3339)}
					// A 503 says "retry later", and a scheduler does: the emulator
					// serialises the 64 racing transactions, and on a loaded machine
					// one may outlast the claim's timeout.
					for try := 0; ; try++ {
						replies[i] = b.do(t, "POST", "/v1/jobs/report", hdr, payload)
						if replies[i].status != http.StatusServiceUnavailable || try == 4 {
							break
						}
						time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			ids := map[any]bool{}
			for _, r := range replies {
				if r.status != 202 {
					t.Fatalf("%d %v", r.status, r.body)
				}
				ids[r.body["run_id"]] = true
			}
			if len(ids) != 1 || b.led.created.Load() != 1 {
				t.Fatalf("ids %v, %d created", ids, b.led.created.Load())
			}
			// Completed duplicate, payload mismatch, publish failure and retry.
			if r := b.do(t, "POST", "/v1/jobs/report", schedHeaders("emu", st), "other"); r.status != 422 {
				t.Fatalf("mismatch: %d %v", r.status, r.body)
			}
			b.pub.fail.Store(true)
			if r := b.do(t, "POST", "/v1/jobs/report", map[string]string{"Idempotency-Key": "k2"}, payload); r.status != 503 {
				t.Fatalf("publish failure: %d %v", r.status, r.body)
			}
			b.pub.fail.Store(false)
			// The failed claim was kept, due now: the retry is a duplicate that republishes it.
			if r := b.do(t, "POST", "/v1/jobs/report", map[string]string{"Idempotency-Key": "k2"}, payload); r.status != 202 || r.body["duplicate"] != true {
				t.Fatalf("retry: %d %v, want 202 duplicate", r.status, r.body)
			}
			// Exactly two messages reach the subscription: the race's and the retry's.
			got := map[string]int{}
			var mu sync.Mutex
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			err = c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
				mu.Lock()
				got[m.Attributes[queue.AttrRunID]]++
				mu.Unlock()
				m.Ack()
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("received %v, want two runs once each", got)
			}
			for id, n := range got {
				if n != 1 {
					t.Errorf("run %s received %d times", id, n)
				}
			}
		})
	}
}

// TestOIDCThroughHandler: the handler answers 401 and 403 as the authenticator says,
// before it touches the ledger.
func TestOIDCThroughHandler(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := &oidctest.Server{PublicKeys: []oidctest.PublicKey{{PublicKey: key.Public(), KeyID: "k", Algorithm: "RS256"}}}
	idp := httptest.NewServer(s)
	t.Cleanup(idp.Close)
	s.SetIssuer(idp.URL)
	v, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Audience: "aud", Allow: []string{"ok@x.iam.gserviceaccount.com"}, Issuers: []string{idp.URL}, JWKSURL: idp.URL + "/keys"})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{cfg: func(c *ingress.Config) { c.Auth = v }})
	tok := func(email string) string {
		c, _ := json.Marshal(map[string]any{"iss": idp.URL, "aud": "aud", "sub": "1", "email": email, "email_verified": true,
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()})
		return "Bearer " + oidctest.SignIDToken(key, "k", "RS256", string(c))
	}
	for _, c := range []struct {
		authz string
		want  int
	}{
		{"", 401},
		{"Bearer junk", 401},
		{tok("nope@x.iam.gserviceaccount.com"), 403},
		{tok("ok@x.iam.gserviceaccount.com"), 202},
	} {
		hdr := map[string]string{"Idempotency-Key": "k"}
		if c.authz != "" {
			hdr["Authorization"] = c.authz
		}
		if r := b.do(t, http.MethodPost, "/v1/jobs/report", hdr, payload); r.status != c.want {
			t.Errorf("%.20s: %d %v, want %d", c.authz, r.status, r.body, c.want)
		}
	}
	if n := b.led.claims.Load(); n != 1 {
		t.Errorf("%d claims, want 1 (only the allowed caller's)", n)
	}
	if r := b.do(t, http.MethodGet, "/v1/runs/"+"0000000000000000000000000000000000000000000000000000000000000000", nil, ""); r.status != 401 {
		t.Errorf("GET /v1/runs without a token: %d", r.status)
	}
}
