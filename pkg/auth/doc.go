// Package auth authenticates the callers of runonce's HTTP endpoints: the ingress's
// POST /v1/jobs/{job} (Cloud Scheduler, cron, webhooks) and the worker's Pub/Sub push
// endpoint.
//
// # Guarantees
//
// OIDC verifies a Google-signed (or any OIDC provider's) ID token completely before it
// looks at the caller: signature against the provider's key set, issuer against the
// configured issuers, audience, expiry and not-before. Only then does it check that the
// token carries an email, that the provider verified it (email_verified), and that it is
// on the allow list (compared case-insensitively). A failure of the first kind wraps
// ErrUnauthenticated (answer 401), of the second ErrForbidden (answer 403). The token
// itself never appears in an error.
//
// X-CloudScheduler-* headers identify a run; they never authenticate it.
//
// The issuer and the key-set URL are configurable, so tests run offline against the
// go-oidc oidctest server.
package auth
