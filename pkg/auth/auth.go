package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/runonce/runonce/pkg/internal/jsonhttp"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrUnauthenticated: no token, or a token that does not verify (401).
	ErrUnauthenticated = errors.New("auth: missing or invalid credentials")
	// ErrForbidden: a valid token from a caller that is not allowed (403).
	ErrForbidden = errors.New("auth: caller not allowed")
)

// Google's ID token issuers and key set.
const (
	GoogleIssuer  = "https://accounts.google.com"
	GoogleJWKSURL = "https://www.googleapis.com/oauth2/v3/certs"
)

// GoogleIssuers returns the two spellings of Google's issuer found in its ID tokens.
func GoogleIssuers() []string { return []string{GoogleIssuer, "accounts.google.com"} }

// Caller is an authenticated caller.
type Caller struct {
	// Email is the verified email of the caller (a service account for Scheduler and
	// push); empty when authentication is off.
	Email   string
	Subject string
	Issuer  string
}

// Authenticator authenticates an HTTP request. Implementations wrap ErrUnauthenticated
// or ErrForbidden.
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (*Caller, error)
}

// None lets every request through: -auth none.
type None struct{}

// Authenticate implements Authenticator.
func (None) Authenticate(context.Context, *http.Request) (*Caller, error) { return &Caller{}, nil }

// OIDCConfig configures NewOIDC.
type OIDCConfig struct {
	// Audience is the audience the tokens must carry (the service's URL for Cloud
	// Scheduler and push). Required.
	Audience string
	// Allow lists the caller emails allowed. Required: an empty list would allow no one.
	Allow []string
	// Issuers are the accepted issuers. Default GoogleIssuers().
	Issuers []string
	// JWKSURL is the provider's key set. Default GoogleJWKSURL.
	JWKSURL string
	// HTTPClient fetches the key set. Default: a client with a 10s timeout.
	HTTPClient *http.Client
	// Now replaces the clock for expiry checks, for tests.
	Now func() time.Time
}

// OIDC verifies bearer ID tokens. It is safe for concurrent use; it caches the key set
// and refetches it when a token names an unknown key.
type OIDC struct {
	verifier *oidc.IDTokenVerifier
	issuers  []string
	allow    map[string]bool
}

// NewOIDC returns a verifier. ctx bounds nothing but carries values to the key-set
// fetches, which happen lazily (its cancellation is ignored).
func NewOIDC(ctx context.Context, c OIDCConfig) (*OIDC, error) {
	if c.Audience == "" {
		return nil, errors.New("auth: oidc needs an audience (-audience)")
	}
	allow := map[string]bool{}
	for _, e := range c.Allow {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if !strings.Contains(e, "@") {
			return nil, fmt.Errorf("auth: allow list entry %q is not an email", e)
		}
		allow[e] = true
	}
	if len(allow) == 0 {
		return nil, errors.New("auth: oidc needs at least one allowed caller email (-allow)")
	}
	issuers := c.Issuers
	if len(issuers) == 0 {
		issuers = GoogleIssuers()
	}
	jwks := c.JWKSURL
	if jwks == "" {
		jwks = GoogleJWKSURL
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	keyCtx := oidc.ClientContext(context.WithoutCancel(ctx), hc)
	keys := oidc.NewRemoteKeySet(keyCtx, jwks)
	v := oidc.NewVerifier(issuers[0], keys, &oidc.Config{
		ClientID:        c.Audience,
		SkipIssuerCheck: true, // checked below against every accepted spelling
		Now:             c.Now,
	})
	return &OIDC{verifier: v, issuers: slices.Clone(issuers), allow: allow}, nil
}

// Authenticate implements Authenticator: the request must carry
// "Authorization: Bearer ID_TOKEN".
func (o *OIDC) Authenticate(ctx context.Context, r *http.Request) (*Caller, error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return nil, fmt.Errorf("%w: no Authorization header (want Bearer ID token)", ErrUnauthenticated)
	}
	if len(h) > 1 {
		return nil, fmt.Errorf("%w: more than one Authorization header", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(h[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return nil, fmt.Errorf("%w: Authorization header is not \"Bearer ID_TOKEN\"", ErrUnauthenticated)
	}
	return o.Verify(ctx, strings.TrimSpace(token))
}

// Verify verifies a raw ID token and checks its caller against the allow list.
func (o *OIDC) Verify(ctx context.Context, rawToken string) (*Caller, error) {
	tok, err := o.verifier.Verify(ctx, rawToken)
	if err != nil {
		var exp *oidc.TokenExpiredError
		if errors.As(err, &exp) {
			return nil, fmt.Errorf("%w: token expired at %s", ErrUnauthenticated, exp.Expiry.UTC().Format(time.RFC3339))
		}
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if !slices.Contains(o.issuers, tok.Issuer) {
		return nil, fmt.Errorf("%w: token issued by %q, want one of %q", ErrUnauthenticated, tok.Issuer, o.issuers)
	}
	var claims struct {
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"` // a boolean, or "true" from some providers
	}
	if err := tok.Claims(&claims); err != nil {
		return nil, fmt.Errorf("%w: token claims: %w", ErrUnauthenticated, err)
	}
	if claims.Email == "" {
		return nil, fmt.Errorf("%w: token has no email claim", ErrForbidden)
	}
	if v := claims.EmailVerified; v != true && v != "true" {
		return nil, fmt.Errorf("%w: email %q is not verified", ErrForbidden, claims.Email)
	}
	if !o.allow[strings.ToLower(claims.Email)] {
		return nil, fmt.Errorf("%w: %q is not on the allow list", ErrForbidden, claims.Email)
	}
	return &Caller{Email: claims.Email, Subject: tok.Subject, Issuer: tok.Issuer}, nil
}

// Middleware returns a middleware that lets a request through to the wrapped handler
// only when a authenticates it: otherwise it answers 401 (no or an invalid token) or 403
// (a valid token of a caller not allowed), with a JSON body {"error": …} that names the
// problem. It is how a worker's push endpoint is protected (worker.Config.PushAuth).
func Middleware(a Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := a.Authenticate(r.Context(), r); err != nil {
				status := http.StatusUnauthorized
				if errors.Is(err, ErrForbidden) {
					status = http.StatusForbidden
				}
				jsonhttp.Error(w, status, err.Error())
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
