package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"

	"github.com/runonce/runonce/pkg/auth"
)

const (
	audience = "https://ingress.example.run.app"
	caller   = "scheduler@proj.iam.gserviceaccount.com"
)

type provider struct {
	key    *rsa.PrivateKey
	issuer string
	jwks   string
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := &oidctest.Server{PublicKeys: []oidctest.PublicKey{{PublicKey: key.Public(), KeyID: "k1", Algorithm: "RS256"}}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.SetIssuer(srv.URL)
	return &provider{key: key, issuer: srv.URL, jwks: srv.URL + "/keys"}
}

func (p *provider) token(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	c := map[string]any{
		"iss": p.issuer, "aud": audience, "sub": "1234", "email": caller, "email_verified": true,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return oidctest.SignIDToken(key, kid, "RS256", string(b))
}

func TestOIDC(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{
		Audience: audience, Allow: []string{"Scheduler@proj.iam.gserviceaccount.com", "other@x.com"},
		Issuers: []string{p.issuer}, JWKSURL: p.jwks,
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		header  string
		wantErr error
		wantMsg string
	}{
		{name: "good token", header: "Bearer " + p.token(t, p.key, "k1", nil)},
		{name: "lower-case scheme", header: "bearer " + p.token(t, p.key, "k1", nil)},
		{name: "missing", header: "", wantErr: auth.ErrUnauthenticated, wantMsg: "no Authorization header"},
		{name: "not bearer", header: "Basic Zm9vOmJhcg==", wantErr: auth.ErrUnauthenticated, wantMsg: "not \"Bearer ID_TOKEN\""},
		{name: "garbage", header: "Bearer not.a.jwt", wantErr: auth.ErrUnauthenticated},
		{name: "expired", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{
			"iat": time.Now().Add(-2 * time.Hour).Unix(), "exp": time.Now().Add(-time.Hour).Unix()}),
			wantErr: auth.ErrUnauthenticated, wantMsg: "expired"},
		{name: "wrong audience", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{"aud": "https://elsewhere"}),
			wantErr: auth.ErrUnauthenticated, wantMsg: "audience"},
		{name: "wrong issuer", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{"iss": "https://evil.example"}),
			wantErr: auth.ErrUnauthenticated, wantMsg: "issued by"},
		{name: "unknown key", header: "Bearer " + p.token(t, other, "k2", nil), wantErr: auth.ErrUnauthenticated},
		{name: "known key ID, wrong key", header: "Bearer " + p.token(t, other, "k1", nil), wantErr: auth.ErrUnauthenticated},
		{name: "unverified email", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{"email_verified": false}),
			wantErr: auth.ErrForbidden, wantMsg: "not verified"},
		{name: "no email_verified", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{"email_verified": nil}),
			wantErr: auth.ErrForbidden, wantMsg: "not verified"},
		{name: "no email", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{"email": nil}),
			wantErr: auth.ErrForbidden, wantMsg: "no email"},
		{name: "email not allowed", header: "Bearer " + p.token(t, p.key, "k1", map[string]any{"email": "intruder@proj.iam.gserviceaccount.com"}),
			wantErr: auth.ErrForbidden, wantMsg: "not on the allow list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/v1/jobs/x", nil)
			if c.header != "" {
				r.Header.Set("Authorization", c.header)
			}
			got, err := v.Authenticate(context.Background(), r)
			if c.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got.Email != caller {
					t.Errorf("email %q", got.Email)
				}
				return
			}
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("error %q does not say %q", err, c.wantMsg)
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(c.header, "Bearer ")) && len(c.header) > 40 {
				t.Error("the token appears in the error")
			}
		})
	}
}

func TestNewOIDCRefusesIncompleteConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []auth.OIDCConfig{
		{Allow: []string{caller}},
		{Audience: audience},
		{Audience: audience, Allow: []string{"not-an-email"}},
	} {
		if _, err := auth.NewOIDC(t.Context(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestMiddlewareAnswersJSON: a refused request gets 401 or 403 with {"error": …} on one
// line ending with a newline, as every JSON answer of the ingress and the worker; an
// authenticated one reaches the handler.
func TestMiddlewareAnswersJSON(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	v, err := auth.NewOIDC(t.Context(), auth.OIDCConfig{Audience: audience, Allow: []string{caller}, Issuers: []string{p.issuer}, JWKSURL: p.jwks})
	if err != nil {
		t.Fatal(err)
	}
	h := auth.Middleware(v)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, c := range []struct {
		header string
		status int
		error  string
	}{
		{"", http.StatusUnauthorized, "no Authorization header"},
		{"Bearer " + p.token(t, p.key, "k1", map[string]any{"email": "intruder@proj.iam.gserviceaccount.com"}), http.StatusForbidden, "not on the allow list"},
		{"Bearer " + p.token(t, p.key, "k1", nil), http.StatusNoContent, ""},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/push", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		h.ServeHTTP(rec, r)
		if rec.Code != c.status {
			t.Errorf("status %d, want %d", rec.Code, c.status)
			continue
		}
		if c.error == "" {
			continue
		}
		var body struct{ Error string }
		if json.Unmarshal(rec.Body.Bytes(), &body) != nil || !strings.Contains(body.Error, c.error) ||
			!strings.HasSuffix(rec.Body.String(), "}\n") || rec.Header().Get("Content-Type") != "application/json" ||
			rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("answer %d %q (%s); want JSON naming %q, ending with a newline, nosniff", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), c.error)
		}
	}
}
